package buffer

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"
)

// Randomized, fixed-seed property tests of the overwrite path.

// streamChunk is one chunk produced by streamWriter.
type streamChunk struct {
	id     uint32
	flags  uint8
	frags  uint16
	data   []byte
	lastID uint32
}

// streamWriter frames packets into chunks of a fixed payload capacity the
// way a TraceWriter does: a packet that does not fit is split, the chunk is
// flagged LastContinues and the next one FirstContinues.
type streamWriter struct {
	capacity int
	nextID   uint32
	cur      streamChunk
	open     bool
}

func (w *streamWriter) flush(out *[]streamChunk) {
	if w.open && w.cur.frags > 0 {
		*out = append(*out, w.cur)
	}
	w.open = false
}

// add frames pkt and appends finished chunks to out.
func (w *streamWriter) add(pkt []byte, out *[]streamChunk) {
	cont := false
	for {
		if !w.open {
			w.cur = streamChunk{id: w.nextID}
			w.nextID++
			w.open = true
			if cont {
				w.cur.flags |= flagFirstContinues
			}
		}
		room := w.capacity - len(w.cur.data) - 2 // 2-byte headers
		if room <= 0 {
			w.flush(out)
			continue
		}
		n := len(pkt)
		if n > room {
			n = room
		}
		w.cur.data = append(w.cur.data, byte(n)|0x80, byte(n>>7))
		w.cur.data = append(w.cur.data, pkt[:n]...)
		w.cur.frags++
		pkt = pkt[n:]
		if len(pkt) == 0 {
			return
		}
		w.cur.flags |= flagLastContinues
		w.flush(out)
		cont = true
	}
}

// TestObserverSeesOverwrittenPackets writes fragmented packets of three
// writers round robin into a small ring buffer: every packet must come out
// exactly once, either through the overwrite observer or the final read,
// in write order per sequence. (The buffer holds more chunks than two
// writers write between two chunks of the third, so no packet can lose its
// continuation to an overwrite.)
func TestObserverSeesOverwrittenPackets(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewSource(seed))
		b := mustNew(t, 16384, RingBuffer)
		got := map[uint16][]string{}
		b.SetOverwriteObserver(func(seq SequenceProperties, packet [][]byte) {
			got[seq.WriterID] = append(got[seq.WriterID], string(bytes.Join(packet, nil)))
		})
		want := map[uint16][]string{}
		writers := []*streamWriter{{capacity: 400}, {capacity: 400}, {capacity: 400}}
		for round := 0; round < 120; round++ {
			for wi, w := range writers {
				wid := uint16(wi + 1)
				var chunks []streamChunk
				for k := 0; k < 1+rng.Intn(3); k++ {
					pkt := make([]byte, 1+rng.Intn(700))
					for i := range pkt {
						pkt[i] = byte(rng.Intn(256))
					}
					want[wid] = append(want[wid], string(pkt))
					w.add(pkt, &chunks)
				}
				if round == 119 {
					w.flush(&chunks)
				}
				for _, c := range chunks {
					b.CopyChunkUntrusted(1, ClientIdentity{}, wid, c.id, c.frags, c.flags, true, c.data)
				}
			}
		}
		if b.Stats().ChunksOverwritten == 0 {
			t.Fatalf("seed %d: nothing was overwritten", seed)
		}
		for _, p := range readPackets(b) {
			got[p.W] = append(got[p.W], p.Data)
		}
		for w := uint16(1); w <= 3; w++ {
			if len(got[w]) != len(want[w]) {
				t.Fatalf("seed %d writer %d: %d packets out, %d written", seed, w, len(got[w]), len(want[w]))
			}
			for i := range want[w] {
				if got[w][i] != want[w][i] {
					t.Fatalf("seed %d writer %d packet %d differs", seed, w, i)
				}
			}
		}
	}
}

// TestOverwriteFastPathMatchesGeneralWalk runs random operations (scrapes,
// recommits, patches, malformed chunks, reads) on three buffers: one without
// an observer (eraseSimple's fast path), one with (eraseObserved's), and one
// with an observer that only ever takes the general erase-mode walk. It
// requires identical memory, stats and reads after every operation, and the
// same packets observed, in the same order.
func TestOverwriteFastPathMatchesGeneralWalk(t *testing.T) {
	seeds := 30
	if testing.Short() {
		seeds = 5
	}
	for seed := int64(1); seed <= int64(seeds); seed++ {
		rng := rand.New(rand.NewSource(seed))
		pol := RingBuffer
		if seed%5 == 0 {
			pol = Discard
		}
		fast := mustNew(t, 4096*(1+rng.Intn(2)), pol)
		observed := mustNew(t, fast.Size(), pol)
		slow := mustNew(t, fast.Size(), pol)
		slow.generalWalkOnly = true
		var sawFast, sawSlow []string
		record := func(to *[]string) OverwriteObserver {
			return func(seq SequenceProperties, p [][]byte) {
				*to = append(*to, fmt.Sprintf("%+v %x", seq, bytes.Join(p, nil)))
			}
		}
		observed.SetOverwriteObserver(record(&sawFast))
		slow.SetOverwriteObserver(record(&sawSlow))
		ids := map[uint16]uint32{}
		for op := 0; op < 400; op++ {
			w := uint16(1 + rng.Intn(3))
			desc := ""
			switch r := rng.Intn(20); {
			case r < 13:
				id := ids[w]
				switch rng.Intn(8) {
				case 0:
					id-- // recommit
				case 1:
					id += 2 // gap
				default:
					ids[w]++
				}
				nf := 1 + rng.Intn(5)
				var data []byte
				for i := 0; i < nf; i++ {
					n := rng.Intn(300)
					data = append(data, byte(n)|0x80, byte(n>>7))
					data = append(data, bytes.Repeat([]byte{byte(op)}, n)...)
				}
				if rng.Intn(10) == 0 {
					data = append(data, 0xff, 0xff, 0xff, 0x7f)
					nf++
				}
				if rng.Intn(15) == 0 {
					nf += 2 // declared more than present
				}
				data = append(data, make([]byte, rng.Intn(40))...)
				flags := uint8(rng.Intn(8))
				complete := rng.Intn(6) != 0
				desc = fmt.Sprintf("copy w=%d c=%d nf=%d flags=%#x complete=%v len=%d", w, id, nf, flags, complete, len(data))
				for _, b := range []*TraceBuffer{fast, observed, slow} {
					b.CopyChunkUntrusted(1, ClientIdentity{}, w, id, uint16(nf), flags, complete, data)
				}
			case r < 16:
				id := ids[w] - uint32(rng.Intn(4))
				ps := []Patch{{Offset: uint32(rng.Intn(200)), Data: [4]byte{byte(rng.Intn(256)), 0x80, 0x81, byte(rng.Intn(3))}}}
				pending := rng.Intn(3) == 0
				desc = fmt.Sprintf("patch w=%d c=%d %+v", w, id, ps)
				pf, po := fast.TryPatchChunkContents(1, w, id, ps, pending), observed.TryPatchChunkContents(1, w, id, ps, pending)
				if pf != po || pf != slow.TryPatchChunkContents(1, w, id, ps, pending) {
					t.Fatalf("seed %d op %d %s: patch results differ", seed, op, desc)
				}
			default:
				desc = "read"
				a, o, c := readPackets(fast), readPackets(observed), readPackets(slow)
				if fmt.Sprint(a) != fmt.Sprint(c) || fmt.Sprint(o) != fmt.Sprint(c) {
					t.Fatalf("seed %d op %d: reads differ:\n%+v\n%+v\n%+v", seed, op, a, o, c)
				}
			}
			for _, b := range []*TraceBuffer{fast, observed} {
				if b.Stats() != slow.Stats() {
					t.Fatalf("seed %d op %d %s: stats differ (observer %v):\n%+v\n%+v", seed, op, desc, b.observer != nil, b.Stats(), slow.Stats())
				}
				if !bytes.Equal(b.mem, slow.mem) {
					t.Fatalf("seed %d op %d %s: memory differs (observer %v)", seed, op, desc, b.observer != nil)
				}
			}
			if len(sawFast) != len(sawSlow) || fmt.Sprint(sawFast) != fmt.Sprint(sawSlow) {
				t.Fatalf("seed %d op %d %s: observed packets differ:\n%v\n%v", seed, op, desc, sawFast, sawSlow)
			}
		}
		if pol == RingBuffer && fast.Stats().ChunksOverwritten == 0 {
			t.Fatalf("seed %d: no overwrite happened", seed)
		}
	}
}
