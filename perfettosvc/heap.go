package perfettosvc

import (
	"runtime"
	"sync"
)

// The Go heap of the consumer sessions. A session's buffers, SMBs and
// output batches are mapped outside the heap (package pipeline); what a
// session keeps on it is bounded by its configuration: pipeline's
// Service.HeapBudget, and, for a session read with ReadBuffers and for
// each clone, an in-memory queue of up to twice its buffers (memSink).
// PerfettoConsumers adds these up as sessions and queues come and go and
// hands the sum to SetHeapLimit, which `serve --perfetto` passes to
// debug.SetMemoryLimit: without a limit the collector lets the heap grow
// to twice its live size, however small the sessions' share of it.

// serveHeapBase is what serve --perfetto holds besides its sessions: its
// tables (protobuf descriptors, CEL), the producer and consumer
// connections' frame buffers, goroutine stacks, and the runtime's own
// memory, which the limit counts too (GC metadata, profiling buckets):
// 7-9 MiB idle. At 8 MiB the collector ran back to back before the first
// session.
const serveHeapBase = 16 << 20

// HeapLimit is the soft memory limit the running sessions and the queues
// still to be read add up to.
func (pc *PerfettoConsumers) HeapLimit() int64 {
	pc.heapMu.Lock()
	defer pc.heapMu.Unlock()
	return serveHeapBase + pc.heapInUse
}

// chargeHeap adds n (negative: gives back) to the sessions' heap and
// tells SetHeapLimit the new limit. Under heapMu, so that the limits
// reach SetHeapLimit in the order they were computed.
func (pc *PerfettoConsumers) chargeHeap(n int64) {
	pc.heapMu.Lock()
	defer pc.heapMu.Unlock()
	pc.heapInUse += n
	if pc.SetHeapLimit != nil {
		pc.SetHeapLimit(serveHeapBase + pc.heapInUse)
	}
}

// heapCharge is n bytes charged to pc's heap until settle (once).
type heapCharge struct {
	pc   *PerfettoConsumers
	n    int64
	once sync.Once
}

func (pc *PerfettoConsumers) newCharge(n int64) *heapCharge {
	pc.chargeHeap(n)
	return &heapCharge{pc: pc, n: n}
}

func (h *heapCharge) settle() {
	if h != nil {
		h.once.Do(func() { h.pc.chargeHeap(-h.n) })
	}
}

// charge charges m's bound to pc until m is read out after its last
// write (end), freed, or dropped unread (a consumer that went away: the
// collector's cleanup settles then).
func (m *memSink) charge(pc *PerfettoConsumers) {
	h := pc.newCharge(int64(m.limit))
	m.mu.Lock()
	m.heap = h
	m.mu.Unlock()
	runtime.AddCleanup(m, (*heapCharge).settle, h)
}

// end says that nothing more is written to m: its charge is settled
// once a reader has taken everything.
func (m *memSink) end() {
	m.mu.Lock()
	m.ended = true
	h := m.settleIfReadLocked()
	m.mu.Unlock()
	h.settle()
}

// settleIfReadLocked returns m's charge once it ended and is empty, else
// nil (m.mu held; the caller settles outside the lock).
func (m *memSink) settleIfReadLocked() *heapCharge {
	if m.ended && len(m.packets) == 0 {
		return m.heap
	}
	return nil
}
