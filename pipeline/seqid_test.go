package pipeline

import (
	"testing"

	"github.com/tracepipe/tracepipe/tracefile"
)

// sequenceID keeps the last key it resolved per buffer: runs of one
// sequence, keys alternating between buffers and keys coming back all get
// the id assigned on first use, and each buffer lists each sequence once.
func TestSequenceIDCache(t *testing.T) {
	s := &Service{readState: readState{seqIDs: map[uint32]uint32{}, nextSeqID: 2}}
	a := &bufferState{seqSeen: map[uint32]bool{}}
	b := &bufferState{seqSeen: map[uint32]bool{}}
	type call struct {
		bs               *bufferState
		producer, writer uint16
		want             uint32
	}
	for i, c := range []call{
		{a, 1, 1, 2}, {a, 1, 1, 2}, {a, 1, 2, 3}, {a, 1, 1, 2},
		{b, 1, 1, 2}, {b, 2, 1, 4}, {a, 2, 1, 4}, {a, 0, 0, 5}, {b, 0, 0, 5}, {a, 1, 2, 3},
	} {
		if got := s.sequenceID(c.bs, c.producer, c.writer); got != c.want {
			t.Fatalf("call %d: producer %d writer %d got id %d, want %d", i, c.producer, c.writer, got, c.want)
		}
	}
	want := map[*bufferState][]tracefile.ProvenanceSequence{
		a: {{ID: 2, ProducerID: 1}, {ID: 3, ProducerID: 1}, {ID: 4, ProducerID: 2}, {ID: 5, ProducerID: 0}},
		b: {{ID: 2, ProducerID: 1}, {ID: 4, ProducerID: 2}, {ID: 5, ProducerID: 0}},
	}
	for bs, w := range want {
		if len(bs.provenance) != len(w) {
			t.Fatalf("provenance %+v, want %+v", bs.provenance, w)
		}
		for i := range w {
			if bs.provenance[i] != w[i] {
				t.Fatalf("provenance %+v, want %+v", bs.provenance, w)
			}
		}
	}
}
