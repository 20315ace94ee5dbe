package pipeline

import (
	"testing"

	"github.com/tracepipe/tracepipe/buffer"
)

// The output batches' bytes are mapped outside the Go heap, one share a
// batch that never spills into the next; a packet that overshoots a
// batch's share moves its bytes to the heap only until the batch is
// recycled; the mapping goes back to the OS once the session is over and
// the last batch a lane held came back, not before. (Not parallel:
// buffer.MappedMemBytes is process-wide.)
func TestOutputBatchesMappedAndGivenBack(t *testing.T) {
	before := buffer.MappedMemBytes()
	s := &Service{}
	s.makeBatches()
	n := s.free.capacity()
	if got := buffer.MappedMemBytes() - before; got != int64(n*batchMem) || s.free.mapped() != got {
		t.Fatalf("%d batches mapped %d bytes (pool says %d), want %d", n, got, s.free.mapped(), n*batchMem)
	}
	a, b := s.free.take(), s.free.take()
	if cap(a.data) != batchMem || len(a.data) != 0 {
		t.Fatalf("a batch starts with len %d cap %d, want 0 and its share %d", len(a.data), cap(a.data), batchMem)
	}
	// Filling a to its share leaves b's bytes alone.
	b.data = append(b.data, 'b')
	a.data = append(a.data, make([]byte, batchMem)...)
	if b.data[0] != 'b' || &a.mem[:1][0] != &a.data[0] {
		t.Fatal("a batch filled to its share moved or wrote past it")
	}
	// One more byte overshoots: the bytes move to the heap; reset brings
	// the batch back to its share.
	a.data = append(a.data, 'x')
	if &a.mem[:1][0] == &a.data[0] || b.data[0] != 'b' {
		t.Fatal("an overshooting packet stayed in the mapping")
	}
	a.reset()
	if len(a.data) != 0 || cap(a.data) != batchMem || &a.mem[:1][0] != &a.data[:1][0] {
		t.Fatal("reset left an overshot batch on the heap")
	}
	s.free.put(a)
	s.free.close() // b is still out, as with a sink that gave up closing
	if got := buffer.MappedMemBytes() - before; got != int64(n*batchMem) {
		t.Fatalf("the mapping was released (%d bytes left) while a lane held a batch", got)
	}
	b.data[0] = 'c' // still writable
	b.Packets = append(b.Packets, b.data[:1])
	b.reset()
	s.free.put(b)
	if got := buffer.MappedMemBytes() - before; got != 0 || s.free.mapped() != 0 {
		t.Fatalf("%d bytes still mapped after the last batch came back", got)
	}
	if b.data != nil || b.mem != nil || b.Packets != nil {
		t.Fatal("a batch kept a slice of the released mapping")
	}
}
