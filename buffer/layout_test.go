package buffer

import (
	"testing"
	"unsafe"
)

// TestSeqStateLayout holds seqState to the layout its comment promises:
// what copies and overwrites touch lies in the first 64 bytes, and the size
// is 128, a size class whose objects are 128-byte aligned, so those bytes
// are one cache line.
func TestSeqStateLayout(t *testing.T) {
	var s seqState
	if got := unsafe.Sizeof(s); got != 128 {
		t.Errorf("seqState is %d bytes, want 128", got)
	}
	hot := map[string]uintptr{
		"ents":       unsafe.Offsetof(s.ents) + unsafe.Sizeof(s.ents),
		"head":       unsafe.Offsetof(s.head) + unsafe.Sizeof(s.head),
		"inversions": unsafe.Offsetof(s.inversions) + unsafe.Sizeof(s.inversions),
		"hist":       unsafe.Offsetof(s.hist) + unsafe.Sizeof(s.hist),
		"last":       unsafe.Offsetof(s.last) + unsafe.Sizeof(s.last),
		"lossBits":   unsafe.Offsetof(s.lossBits) + unsafe.Sizeof(s.lossBits),
		"producer":   unsafe.Offsetof(s.producer) + unsafe.Sizeof(s.producer),
		"writer":     unsafe.Offsetof(s.writer) + unsafe.Sizeof(s.writer),
		"client":     unsafe.Offsetof(s.client) + unsafe.Sizeof(s.client),
	}
	for name, end := range hot {
		if end > 64 {
			t.Errorf("seqState.%s ends at byte %d, past the first cache line", name, end)
		}
	}
	// Heap-allocated seqStates (as the buffer makes them) start on a
	// 128-byte boundary.
	for i := 0; i < 64; i++ {
		seqSink = &seqState{}
		if p := uintptr(unsafe.Pointer(seqSink)); p%128 != 0 {
			t.Fatalf("seqState allocated at %#x, not 128-byte aligned", p)
		}
	}
}

// seqSink makes the test's seqStates escape to the heap.
var seqSink *seqState

// TestHistogramBucketLine checks that a bucket's count and sum are adjacent
// (16 bytes, 16-aligned: never split across cache lines).
func TestHistogramBucketLine(t *testing.T) {
	var h histogram
	if d := uintptr(unsafe.Pointer(&h.buckets[1])) - uintptr(unsafe.Pointer(&h.buckets[0])); d != 16 {
		t.Errorf("histogram bucket stride %d, want 16", d)
	}
}
