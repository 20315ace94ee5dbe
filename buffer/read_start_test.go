package buffer

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// walkFirstLive is where the full walk from the oldest record first stops
// for a record (rather than skipping it): the first record whose writer id
// is set, which must belong to a sequence that still holds records. It is
// the definition firstLive must agree with.
func walkFirstLive(b *TraceBuffer) (int, error) {
	if b.usedSize == 0 {
		return -1, nil
	}
	off := b.oldest()
	for range len(b.mem)/hdrSize + 1 {
		if pw := b.recPriWri(off); pw != 0 {
			if s := b.lookupSeq(pw); s == nil || s.n() == 0 {
				return 0, fmt.Errorf("record at %d has writer %#x but no sequence holds it", off, pw)
			}
			return off, nil
		}
		next := off + b.recOuter(off)
		wrapped := next >= b.usedSize
		if next == b.wr || (wrapped && b.wr == 0) {
			return -1, nil
		}
		if wrapped {
			off = 0
		} else {
			off = next
		}
	}
	return 0, fmt.Errorf("the walk from %d does not end (wr %d, used %d)", b.oldest(), b.wr, b.usedSize)
}

// A read pass starts at the first record a sequence still holds, not at
// the oldest record: the records already read stay in the ring (as
// padding) until overwritten, and walking them made every pass cost the
// whole ring.
func TestReadPassStartsAtFirstUnreadRecord(t *testing.T) {
	for _, wrap := range []bool{false, true} {
		t.Run(fmt.Sprintf("wrapped=%v", wrap), func(t *testing.T) {
			b := scNew(t, 1<<20, RingBuffer)
			n := 1000 // 512-byte records: half the ring
			if wrap {
				n = 5000
			}
			id := uint32(0)
			for range n {
				scCopyLen(t, newChunk(t, b, 1, 1, id).AddPacket(512-16, byte(id), 0), 512)
				id++
				if id%100 == 0 {
					readPackets(b)
				}
			}
			readPackets(b)
			b.BeginRead()
			if b.rd != -1 {
				t.Fatalf("everything was read: the pass starts at %d, want -1 (nothing to walk)", b.rd)
			}
			at := b.wr
			if at == b.usedSize && wrap {
				at = 0
			}
			newChunk(t, b, 1, 1, id).AddPacket(100, 'x', 0).Copy()
			// (2,2) writes the first half of a packet: it stalls.
			newChunk(t, b, 2, 2, 0).AddPacket(100, 'y', scOn).Copy()
			b.BeginRead()
			if b.rd != at {
				t.Fatalf("the pass starts at %d, want %d (the first unread record; oldest is %d)", b.rd, at, b.oldest())
			}
			scPass(t, b, pk(100, 'x'), scEOF)
			newChunk(t, b, 2, 2, 1).AddPacket(50, 'z', scFrom).Copy()
			scPass(t, b, cat(pk(100, 'y'), pk(50, 'z')), scEOF)
		})
	}
}

// firstLive agrees with the full walk whatever the buffer went through:
// several writers, fragments that stall, chunks out of order, scraped
// chunks committed again, partial reads, wrapping, overwrites.
func TestFirstLiveMatchesTheWalk(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		b := scNew(t, 64<<10, RingBuffer)
		next := map[uint16]uint32{}
		for step := range 3000 {
			w := uint16(rng.IntN(5) + 1)
			switch r := rng.IntN(10); {
			case r < 6:
				id := next[w]
				if rng.IntN(8) == 0 {
					id++ // leaves a gap, filled (out of order) or not
				}
				next[w] = id + 1
				var flags uint8
				if rng.IntN(3) == 0 {
					flags |= scOn
				}
				if rng.IntN(3) == 0 {
					flags |= scFrom
				}
				c := newChunk(t, b, w, w, id).AddPacket(rng.IntN(1500)+1, byte(step), flags)
				if rng.IntN(10) == 0 {
					c.Incomplete()
				}
				c.Copy()
			case r < 7:
				if id := next[w]; id > 1 {
					newChunk(t, b, w, w, id-2).AddPacket(rng.IntN(300)+1, byte(step), 0).Copy()
				}
			case r < 9:
				b.BeginRead()
				for k := rng.IntN(20); k > 0; k-- {
					if _, ok := readOne(b); !ok {
						break
					}
				}
			default:
				readPackets(b)
			}
			want, err := walkFirstLive(b)
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if got := b.firstLive(); got != want {
				t.Fatalf("seed %d step %d: firstLive %d, the walk stops first at %d (wr %d, used %d)", seed, step, got, want, b.wr, b.usedSize)
			}
		}
	}
}
