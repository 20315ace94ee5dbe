package buffer

import "github.com/tracepipe/tracepipe/internal/loss"

// The inner layer of reads and overwrites: a sequence reader walks one
// sequence's records in chunk-id order, from its first record up to a
// target record, yielding packets and erasing records it leaves exhausted.
// In erase mode (overwrites) it never stalls: records that are incomplete or
// wait for patches are consumed anyway.

type seqReader struct {
	seq    *seqState
	target int // offset of the record the walk ends at
	erase  bool
}

// fragRef locates one fragment of a packet being reassembled.
type fragRef struct {
	rec       int // record offset
	from      int // payload offset of the fragment header
	data, end int // payload offsets of the fragment bytes
}

// Reassembly outcomes.
const (
	raSuccess = iota
	raNotEnoughData
	raDataLoss
)

// initReader checks the sequence for a chunk-id gap since the last consumed
// record (done at every reader construction, also in erase mode).
func (b *TraceBuffer) initReader(r *seqReader) {
	s := r.seq
	if !s.last.set || s.n() == 0 {
		return
	}
	first := s.front().id
	if s.last.wasIncomplete && first == s.last.id {
		return // a scraped chunk re-admitted after its eviction
	}
	if first != s.last.id+1 {
		s.addLoss(loss.ReadGap)
	}
}

// payload returns the valid payload bytes of the record at off.
func (b *TraceBuffer) payload(off int) []byte {
	return b.mem[off+hdrSize : off+hdrSize+b.recPayload(off)]
}

// consume marks n bytes of the record at off as consumed and counts the
// record as read (or overwritten) when nothing is left.
func (b *TraceBuffer) consume(off, n int, erase bool) {
	avail := b.recAvail(off) - n
	b.guard(off, hdrSize)
	put16(b.mem, off+hdrAvail, uint16(avail))
	if avail == 0 {
		outer := uint64(b.recOuter(off))
		if erase {
			b.stats.ChunksOverwritten++
			b.stats.BytesOverwritten += outer
		} else {
			b.stats.ChunksRead++
			b.stats.BytesRead += outer
		}
	}
}

// nextPacket yields the next packet of r's sequence into *out (slices into
// buffer memory). It returns false when the walk reached past the target,
// or, in read mode, when the sequence stalls for this read pass.
func (b *TraceBuffer) nextPacket(r *seqReader, out *[][]byte) bool {
	s := r.seq
	if !r.erase && s.skipGen == b.gen {
		return false
	}
	for s.n() > 0 {
		c := s.front()
		off := int(c.off)
		flags := b.recFlags(off)
		p := b.payload(off)
		start := len(p) - b.recAvail(off)
		if start == 0 {
			// The first visit of this record: bring it into cache.
			b.prefetchRange(off, off+hdrSize+len(p))
			b.warm(off+hdrSize, off+hdrSize+len(p))
		}
		data, end := shortFragment(p, start)
		st := tokOK
		if data == 0 || end > len(p) {
			data, end, st = nextFragment(p, start)
		}
		if st != tokOK {
			if st == tokCorrupt {
				s.addLoss(loss.ChunkCorrupted)
			}
			if flags&flagIncomplete != 0 && !r.erase {
				s.skipGen = b.gen
				return false
			}
			b.eraseFront(s)
			if off == r.target {
				return false
			}
			continue
		}
		switch fragType(start == 0, end >= len(p), flags) {
		case fragWhole:
			b.consume(off, end-start, r.erase)
			if end == data {
				continue
			}
			*out = append((*out)[:0], p[data:end])
			return true
		case fragBegin:
			res, reason := b.reassemble(s, c, fragRef{rec: off, from: start, data: data, end: end})
			switch {
			case res == raSuccess:
				b.stats.ReadaheadsSucceeded++
				b.consumeFrags(r.erase)
				*out = (*out)[:0]
				for _, f := range b.raFrags {
					if f.end > f.data {
						*out = append(*out, b.mem[f.rec+hdrSize+f.data:f.rec+hdrSize+f.end])
					}
				}
				return true
			case res == raDataLoss:
				b.stats.ReadaheadsFailed++
				b.consumeFrags(r.erase)
				s.addLoss(reason)
			case !r.erase:
				b.stats.ReadaheadsFailed++
				s.skipGen = b.gen
				return false
			default:
				b.stats.ReadaheadsFailed++
				b.consumeFrags(r.erase)
				s.addLoss(loss.Overwrite)
			}
		default: // a continuation without its beginning
			s.addLoss(loss.OrphanContinuation)
			b.consume(off, end-start, r.erase)
		}
	}
	return false
}

// consumeFrags consumes every fragment collected by reassemble.
func (b *TraceBuffer) consumeFrags(erase bool) {
	for _, f := range b.raFrags {
		b.consume(f.rec, f.end-f.from, erase)
	}
}

// reassemble collects the fragments of the packet beginning with first (the
// last fragment of record c, the front of s) from the following records,
// without consuming anything. The fragments are left in b.raFrags.
func (b *TraceBuffer) reassemble(s *seqState, c seqEnt, first fragRef) (int, uint32) {
	b.raFrags = append(b.raFrags[:0], first)
	if b.recFlags(first.rec)&flagNeedsPatching != 0 {
		return raNotEnoughData, 0
	}
	prev := c.id
	for i := 1; i < s.n(); i++ {
		e := s.at(i)
		off := int(e.off)
		flags := b.recFlags(off)
		if flags&flagNeedsPatching != 0 {
			return raNotEnoughData, 0
		}
		if e.id != prev+1 {
			return raDataLoss, loss.ReassemblyGap
		}
		prev = e.id
		p := b.payload(off)
		start := len(p) - b.recAvail(off)
		data, end, st := nextFragment(p, start)
		if st != tokOK {
			if st == tokCorrupt {
				return raDataLoss, loss.ChunkCorrupted
			}
			continue // an empty chunk in the middle of the chain
		}
		f := fragRef{rec: off, from: start, data: data, end: end}
		switch fragType(start == 0, end >= len(p), flags) {
		case fragContinue:
			b.raFrags = append(b.raFrags, f)
		case fragEndPart:
			b.raFrags = append(b.raFrags, f)
			return raSuccess, 0
		default:
			return raDataLoss, loss.ReassemblyBrokenChain
		}
	}
	return raNotEnoughData, 0
}
