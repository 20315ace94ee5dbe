package buffer

import (
	"fmt"
	"runtime"
	"sync/atomic"
)

// A buffer's memory lives outside the Go heap (mem_unix.go maps it
// anonymously): the collector's heap goal is a multiple of the live heap,
// so a ring on the heap would let the process grow to about twice its
// buffers, and freeing it would give nothing back until the scavenger ran.
// Mapped memory is faulted in as it is written and unmapped by Close, at
// once. Close is the owner's job; the cleanup registered in New only
// catches a buffer its owner dropped (tests, mostly) and is counted so that
// a leak shows.

var (
	mappedBytes  atomic.Int64 // bytes of buffer memory mapped now
	leakedCloses atomic.Int64 // buffers unmapped by the cleanup, not Close
	leakedBytes  atomic.Int64 // their bytes
	memBytes     atomic.Int64 // bytes of Mem mapped now
	leakedMems   atomic.Int64 // Mems unmapped by the cleanup, not Release
)

// MappedBytes returns the bytes of ring memory (New) mapped by this
// process now. Memory handed to BeginClone is the caller's and not
// counted here.
func MappedBytes() int64 { return mappedBytes.Load() }

// UnclosedBuffers returns how many buffers (and how many bytes) were
// released by the garbage collector's cleanup instead of Close: each is an
// owner that forgot to close (the memory was held until a collection).
func UnclosedBuffers() (buffers, bytes int64) { return leakedCloses.Load(), leakedBytes.Load() }

// ownedMem is memory a buffer mapped itself and must unmap.
type ownedMem struct {
	cleanup runtime.Cleanup
	closed  bool
}

// allocMem maps n bytes (a multiple of the page size) for b.
func (b *TraceBuffer) allocMem(n int) error {
	m, err := mapMem(n)
	if err != nil {
		return fmt.Errorf("buffer: mapping %d bytes: %w", n, err)
	}
	mappedBytes.Add(int64(n))
	b.mem = m
	b.own = &ownedMem{}
	b.own.cleanup = runtime.AddCleanup(b, func(m []byte) {
		// Counted once unmapped: whoever sees the count sees the
		// memory gone (MappedBytes).
		releaseMem(m)
		leakedBytes.Add(int64(len(m)))
		leakedCloses.Add(1)
	}, m)
	return nil
}

// releaseMem unmaps memory from allocMem.
func releaseMem(m []byte) {
	unmapMem(m)
	mappedBytes.Add(-int64(len(m)))
}

// Close releases the buffer's memory: a ring's goes back to the OS at once;
// a clone's memory handed to BeginClone stays the caller's. A pending
// incremental clone of b is completed first, so it never reads unmapped
// memory. After Close the buffer holds no packets: Size, Policy, Stats and
// the other accessors still answer, but any copy or read panics. Close is
// idempotent. The owner must not use a packet slice from b after Close.
func (b *TraceBuffer) Close() {
	if b.cow != nil {
		b.cow.Finish()
	}
	if b.own != nil && !b.own.closed {
		b.own.closed = true
		b.own.cleanup.Stop()
		releaseMem(b.mem)
	}
	b.mem = nil
	b.usedSize, b.wr, b.rd = 0, 0, 0
	b.rdrActive = false
}

// Closed reports whether Close ran.
func (b *TraceBuffer) Closed() bool { return b.mem == nil }

// Mem is memory mapped outside the Go heap as a ring's is, for the other
// large fixed allocations of a session (the output batches of package
// pipeline): zeroed, faulted in as it is written, unmapped by Release at
// once. Release is the owner's job, after the last use of Bytes; a Mem
// its owner dropped is unmapped by a cleanup and counted (LeakedMems).
// Memory outside the heap is never scanned by the collector: it must not
// hold the only pointer to a heap object.
type Mem struct {
	b       []byte
	n       int
	cleanup runtime.Cleanup
	done    atomic.Bool
}

// NewMem maps n bytes (rounded up to whole pages).
func NewMem(n int) (*Mem, error) {
	if n <= 0 {
		return nil, fmt.Errorf("buffer: mapping %d bytes: want a positive size", n)
	}
	n = (n + pageSize - 1) &^ (pageSize - 1)
	b, err := mapMem(n)
	if err != nil {
		return nil, fmt.Errorf("buffer: mapping %d bytes: %w", n, err)
	}
	memBytes.Add(int64(n))
	m := &Mem{b: b, n: n}
	m.cleanup = runtime.AddCleanup(m, func(b []byte) {
		// Counted once unmapped: whoever sees the count sees the
		// memory gone (MappedMemBytes).
		unmapMem(b)
		memBytes.Add(-int64(len(b)))
		leakedMems.Add(1)
	}, b)
	return m, nil
}

// Bytes is the mapped memory. REQUIRES: Release has not run.
func (m *Mem) Bytes() []byte { return m.b }

// Size is the mapped size in bytes (0 after Release).
func (m *Mem) Size() int {
	if m.done.Load() {
		return 0
	}
	return m.n
}

// Release unmaps the memory; idempotent. No slice of Bytes may be used
// afterwards.
func (m *Mem) Release() {
	if m.done.Swap(true) {
		return
	}
	m.cleanup.Stop()
	unmapMem(m.b)
	memBytes.Add(-int64(m.n))
	m.b = nil
}

// MappedMemBytes returns the bytes of Mem mapped by this process now
// (ring memory is MappedBytes').
func MappedMemBytes() int64 { return memBytes.Load() }

// LeakedMems returns how many Mems the garbage collector's cleanup
// unmapped instead of Release.
func LeakedMems() int64 { return leakedMems.Load() }
