package buffer

import "fmt"

// An incremental clone is CloneReadOnly spread over time: BeginClone
// captures everything but the memory at once (cursors, sequence states,
// stats: O(sequences + chunks), not O(bytes)) and the memory is copied
// in slices by Step, interleaved with the buffer's normal use. Every
// write to a byte range not yet copied first copies the slices it
// touches (copy-before-overwrite), so the clone ends up holding exactly
// the bytes of the moment BeginClone ran. Copying starts at the write
// cursor and goes forward, the direction writes go, so in a ring buffer
// the writer rarely has to copy on its own account.
//
// The destination memory is the caller's: a snapshot hands in memory it
// pre-faulted elsewhere (page faults, not memcpy, dominate a fresh copy),
// so Step costs memcpy time only.

// CloneSliceSize is the granularity of an incremental clone's copy.
const CloneSliceSize = 1 << 20

// PendingClone is an incremental clone in progress. It and its source
// buffer are used on one goroutine.
type PendingClone struct {
	src    *TraceBuffer
	dst    *TraceBuffer
	used   int    // src.usedSize at BeginClone: the bytes to copy
	copied []bool // per slice of [0, used)
	left   int    // slices not copied yet
	next   int    // the slice Step copies next, in copy order
	slice  int    // bytes per slice (CloneSliceSize; smaller in tests)
}

// BeginClone starts an incremental read-only clone of b into mem, which
// must be exactly Size() bytes and is owned by the clone from now on.
// Only one clone of b may be pending at a time.
func (b *TraceBuffer) BeginClone(mem []byte) (*PendingClone, error) {
	return b.beginClone(mem, CloneSliceSize)
}

func (b *TraceBuffer) beginClone(mem []byte, slice int) (*PendingClone, error) {
	if len(mem) != len(b.mem) {
		return nil, fmt.Errorf("buffer: clone memory is %d bytes, the buffer %d", len(mem), len(b.mem))
	}
	if b.cow != nil {
		return nil, fmt.Errorf("buffer: a clone is already in progress")
	}
	c := b.cloneState(mem)
	n := (b.usedSize + slice - 1) / slice
	p := &PendingClone{src: b, dst: c, used: b.usedSize, copied: make([]bool, n), left: n, slice: slice}
	if n > 0 {
		p.next = (b.wr / slice) % n
		b.cow = p
	}
	return p, nil
}

// Done reports whether the clone is complete.
func (p *PendingClone) Done() bool { return p.left == 0 }

// Remaining returns the bytes still to copy (an upper bound).
func (p *PendingClone) Remaining() int { return p.left * p.slice }

// Step copies up to maxBytes (at least one slice) and reports whether the
// clone is complete.
func (p *PendingClone) Step(maxBytes int) bool {
	for budget := maxBytes; p.left > 0 && (budget > 0 || budget == maxBytes); budget -= p.slice {
		for p.copied[p.next] {
			p.next = (p.next + 1) % len(p.copied)
		}
		p.copySlice(p.next)
	}
	return p.left == 0
}

// Finish copies whatever is left.
func (p *PendingClone) Finish() { p.Step(p.left * p.slice) }

// Clone returns the read-only clone; it panics before Done, since a
// partial clone must never be read.
func (p *PendingClone) Clone() *TraceBuffer {
	if p.left != 0 {
		panic("buffer: PendingClone.Clone before the copy is complete")
	}
	return p.dst
}

// Abandon stops the clone; the source buffer goes on without it.
func (p *PendingClone) Abandon() {
	if p.src.cow == p {
		p.src.cow = nil
	}
	p.left = 0
}

func (p *PendingClone) copySlice(i int) {
	from := i * p.slice
	to := min(from+p.slice, p.used)
	copy(p.dst.mem[from:to], p.src.mem[from:to])
	p.copied[i] = true
	p.left--
	if p.left == 0 && p.src.cow == p {
		p.src.cow = nil
	}
}

// guard copies the not yet copied slices of [off, off+n) before b
// changes them. It is called by every in-place write to b.mem.
func (b *TraceBuffer) guard(off, n int) {
	p := b.cow
	if p == nil || off >= p.used {
		return
	}
	end := min(off+n, p.used)
	for i := off / p.slice; i*p.slice < end; i++ {
		if !p.copied[i] {
			p.copySlice(i)
			if p.left == 0 {
				return
			}
		}
	}
}
