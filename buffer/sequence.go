package buffer

import (
	"sort"

	"github.com/tracepipe/tracepipe/internal/loss"
)

// A sequence is the stream of chunks of one (producer, writer) pair.

// seqEnt is one record of a sequence: its buffer offset and chunk id (kept
// here too so searches stay inside this slice).
type seqEnt struct {
	off uint32
	id  uint32
}

// consumedChunk remembers the most recently erased record of a sequence.
type consumedChunk struct {
	id            uint32
	payloadSize   uint16 // a record payload is at most maxRecordCap bytes
	wasIncomplete bool
	// set says the sequence erased a record (the fields above describe
	// it); false also means the sequence never held one.
	set bool
}

// seqState is the per-sequence state (Perfetto's SequenceState).
//
// Its fields are ordered and sized so that everything a copy or an
// overwrite touches fits in the first 64 bytes, one cache line: with
// hundreds of writers in round robin, a sequence's state has left the
// cache by the time its next chunk arrives, and each further line was one
// more miss per chunk. The fields after that line are used by reads and
// sequence garbage collection only.
type seqState struct {
	// ents[head:] are the sequence's records, kept sorted by chunk id in
	// serial-number order (so reads follow write order even when chunks
	// were committed out of order).
	ents []seqEnt
	head int32
	// inversions counts adjacent pairs of ents[head:] that are not strictly
	// increasing; binary search is used only when it is 0.
	inversions int32
	hist       *histogram

	last     consumedChunk
	lossBits uint32 // pending DataLossReason bits for the next packet

	producer, writer uint16
	client           ClientIdentity

	// Read and garbage-collection state, on the second line.
	skipGen  uint64 // stalled for the read pass with this generation
	ageForGC uint64 // when ents last became empty
	// The padding makes the size 128 bytes, an allocation size class whose
	// objects start on a 128-byte boundary, so the first line is one line
	// (TestSeqStateLayout).
	_ [48]byte
}

// idBefore reports whether chunk id a precedes b (serial-number order).
func idBefore(a, b uint32) bool { return int32(a-b) < 0 }

func (s *seqState) n() int              { return len(s.ents) - int(s.head) }
func (s *seqState) at(i int) seqEnt     { return s.ents[int(s.head)+i] }
func (s *seqState) front() seqEnt       { return s.ents[s.head] }
func (s *seqState) back() seqEnt        { return s.ents[len(s.ents)-1] }
func inverted(a, b seqEnt) bool         { return !idBefore(a.id, b.id) }
func (s *seqState) addLoss(bits uint32) { s.lossBits |= bits | loss.Present }

// popFront removes the first record.
func (s *seqState) popFront() {
	if s.n() >= 2 && inverted(s.ents[s.head], s.ents[s.head+1]) {
		s.inversions--
	}
	s.head++
	if int(s.head) == len(s.ents) {
		s.ents = s.ents[:0]
		s.head = 0
	}
}

// insertAt inserts e at index i (relative to head).
func (s *seqState) insertAt(i int, e seqEnt) {
	n := s.n()
	if n > 0 {
		if i > 0 && inverted(s.at(i-1), e) {
			s.inversions++
		}
		if i < n && inverted(e, s.at(i)) {
			s.inversions++
		}
		if i > 0 && i < n && inverted(s.at(i-1), s.at(i)) {
			s.inversions--
		}
	}
	if len(s.ents) == cap(s.ents) && s.head > 0 && int(s.head)*4 >= len(s.ents) {
		// Reuse the space of popped records instead of growing.
		k := copy(s.ents, s.ents[s.head:])
		s.ents = s.ents[:k]
		s.head = 0
	}
	s.ents = append(s.ents, seqEnt{})
	p := int(s.head) + i
	copy(s.ents[p+1:], s.ents[p:len(s.ents)-1])
	s.ents[p] = e
}

// findFromBack walks the records from the back until one whose id does not
// follow chunkID. It returns the index to insert at and whether a record
// with exactly chunkID exists (at index pos).
func (s *seqState) findFromBack(chunkID uint32) (pos int, same bool) {
	i := s.n() - 1
	for ; i >= 0; i-- {
		id := s.at(i).id
		if id == chunkID {
			return i, true
		}
		if idBefore(id, chunkID) {
			break
		}
	}
	return i + 1, false
}

// find returns the index of the record with chunkID, or -1.
func (s *seqState) find(chunkID uint32) int {
	n := s.n()
	if n == 0 {
		return -1
	}
	if s.back().id == chunkID {
		return n - 1
	}
	first := s.front().id
	if s.inversions == 0 && int32(s.back().id-first) >= 0 {
		// Ids strictly increase and span less than 2^31, so their distance
		// from the first id increases too.
		key := chunkID - first
		es := s.ents[s.head:]
		lo, hi := 0, n-1
		for lo < hi {
			m := int(uint(lo+hi) >> 1)
			if es[m].id-first < key {
				lo = m + 1
			} else {
				hi = m
			}
		}
		if es[lo].id == chunkID {
			return lo
		}
		return -1
	}
	for i := n - 1; i >= 0; i-- {
		if s.at(i).id == chunkID {
			return i
		}
	}
	return -1
}

// Empty-sequence garbage collection: sequences outlive their records so
// that gaps across read passes are still detected, but only the most
// recently emptied kKeepLastEmptySeq of them are kept.
const (
	keepLastEmptySeq = 1024
	emptySeqSlack    = 128
)

// gcEmptySequences deletes the oldest empty sequences when there are too
// many of them.
func (b *TraceBuffer) gcEmptySequences() {
	if b.emptySeqs <= keepLastEmptySeq+emptySeqSlack {
		return
	}
	type aged struct {
		key uint32
		age uint64
	}
	var empty []aged
	for k, s := range b.seqs {
		if s.n() == 0 {
			empty = append(empty, aged{k, s.ageForGC})
		}
	}
	sort.Slice(empty, func(i, j int) bool {
		if empty[i].age != empty[j].age {
			return empty[i].age < empty[j].age
		}
		return empty[i].key < empty[j].key
	})
	for i := 0; i < len(empty)-keepLastEmptySeq; i++ {
		delete(b.seqs, empty[i].key)
	}
	if len(empty) > keepLastEmptySeq {
		b.emptySeqs = keepLastEmptySeq
	} else {
		b.emptySeqs = len(empty)
	}
	b.cacheKey, b.cacheSeq = 0, nil
}
