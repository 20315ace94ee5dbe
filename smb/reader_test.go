package smb

import (
	"bytes"
	"testing"
)

// TestScrapeGoldenPreflush scrapes Perfetto's pre-flush SMB: the two chunks
// still BeingWritten are reported incomplete without their last counted
// (padding) fragment, the Complete ones whole, and nothing changes state.
func TestScrapeGoldenPreflush(t *testing.T) {
	dir := goldenDir(t, "")
	raw := readGolden(t, dir, "smb_preflush.bin")
	s := loadSMB(t, raw, 4096)
	r := NewReader(s)
	var got []ChunkView
	r.Scrape(func(v *ChunkView) {
		c := *v
		c.Payload = bytes.Clone(v.Payload)
		got = append(got, c)
	})
	if len(got) != 4 {
		t.Fatalf("scraped %d chunks, want 4", len(got))
	}
	type sum struct {
		w        uint16
		id       uint32
		frags    uint16
		flags    uint8
		complete bool
	}
	want := []sum{{1, 0, 6, 6, true}, {2, 0, 4, 0, false}, {1, 1, 1, 3, true}, {1, 2, 4, 1, false}}
	for i, v := range got {
		if g := (sum{v.WriterID, v.ChunkID, v.Fragments, v.Flags, v.Complete}); g != want[i] {
			t.Errorf("chunk %d: %+v want %+v", i, g, want[i])
		}
		if _, n, _, why := ParseFragments(v.Payload, int(v.Fragments)); why >= 0 || n != int(v.Fragments) {
			t.Errorf("chunk %d: payload does not hold its fragments", i)
		}
	}
	if !bytes.Equal(s.Bytes(), raw) {
		t.Error("Scrape modified the SMB")
	}
	// The scraped B chunk alone yields B1..B4.
	ra := newReassembler()
	ra.addChunk(&got[1])
	pk, _ := ra.packets(2)
	want2 := readPacketsTxt(t, dir)[2]
	if len(pk.packets) != 4 || !bytes.Equal(pk.packets[3], want2[3]) {
		t.Errorf("scraped B packets: %d", len(pk.packets))
	}
}

// TestScrapeLiveWriter scrapes while a writer holds its chunk: finished
// packets are visible, the one in progress is not, and the chunk stays
// BeingWritten.
func TestScrapeLiveWriter(t *testing.T) {
	s, _ := NewHeapSMB(4*4096, 4096)
	arb, _ := NewArbiter(s, ArbiterOptions{OnCommit: func(*CommitData) {}})
	w, _ := arb.NewTraceWriter(1, Drop)
	r := NewReader(s)
	n := 0
	r.Scrape(func(*ChunkView) { n++ })
	if n != 0 {
		t.Fatal("scraped an empty SMB")
	}
	w.WritePacket([]byte{0x40, 0x01})
	p := w.NewTracePacket()
	p.AppendVarint(8, 2) // unfinished
	var views []ChunkView
	r.Scrape(func(v *ChunkView) { c := *v; c.Payload = bytes.Clone(v.Payload); views = append(views, c) })
	if len(views) != 1 || views[0].Complete || views[0].Fragments != 1 {
		t.Fatalf("views %+v", views)
	}
	if want := []byte{5, 0xb8, 0x05, 0x01, 0x40, 0x01}; !bytes.Equal(views[0].Payload, want) {
		t.Fatalf("payload % x want % x", views[0].Payload, want)
	}
	if st := StateOf(s.PageBitmap(0), 0); st != ChunkBeingWritten {
		t.Fatalf("state %v after scrape", st)
	}
	p.Finish()
	views = views[:0]
	r.Scrape(func(v *ChunkView) { c := *v; views = append(views, c) })
	if len(views) != 1 || views[0].Fragments != 2 {
		t.Fatalf("after finishing: %+v", views)
	}
}

// corruptCase builds a one-page SMB and a commit naming page 0 chunk 0.
func TestReaderRejectsMalformed(t *testing.T) {
	valid := func(mem []byte) {
		store32(mem, 0, 0x10000003) // Div1, chunk 0 Complete
		ChunkHeader{ChunkID: 1, WriterID: 1, Count: 2}.Encode(mem[8:])
		copy(mem[16:], []byte{2, 0x40, 1, 1, 0x50})
	}
	cases := []struct {
		name   string
		mutate func(mem []byte)
		move   ChunkToMove
		want   RejectReason
	}{
		{"page out of range", nil, ChunkToMove{Page: 1}, RejectPageOutOfRange},
		{"huge page", nil, ChunkToMove{Page: 1 << 31}, RejectPageOutOfRange},
		{"unpartitioned", func(m []byte) { store32(m, 0, 3) }, ChunkToMove{}, RejectBadLayout},
		{"reserved layout", func(m []byte) { store32(m, 0, 0x60000003) }, ChunkToMove{}, RejectBadLayout},
		{"chunk index", nil, ChunkToMove{Chunk: 1}, RejectChunkIndex},
		{"chunk index 14", func(m []byte) { store32(m, 0, 0x5FFFFFFF) }, ChunkToMove{Chunk: 14}, RejectChunkIndex},
		{"being written", func(m []byte) { store32(m, 0, 0x10000001) }, ChunkToMove{}, RejectNotComplete},
		{"free", func(m []byte) { store32(m, 0, 0x10000000) }, ChunkToMove{}, RejectNotComplete},
		{"writer 0", func(m []byte) { ChunkHeader{Count: 2}.Encode(m[8:]) }, ChunkToMove{}, RejectBadWriterID},
		{"writer 32768", func(m []byte) { ChunkHeader{WriterID: 0x8000, Count: 2}.Encode(m[8:]) }, ChunkToMove{}, RejectBadWriterID},
		{"more fragments than present", func(m []byte) {
			ChunkHeader{WriterID: 1, Count: 42}.Encode(m[8:])
			for off := 16; off < 16+4040; off += 101 { // 40 fragments of 100 bytes
				m[off] = 100
			}
			m[16+4040] = 39 // and one of 39: the payload is full after 41
		}, ChunkToMove{}, RejectFragmentOverrun},
		{"size past chunk", func(m []byte) { copy(m[16:], []byte{0xff, 0x7f}) }, ChunkToMove{}, RejectFragmentOverrun},
		{"varint past chunk", func(m []byte) {
			for i := 16; i < 4096; i++ {
				m[i] = 0x80
			}
		}, ChunkToMove{}, RejectBadVarint},
		{"11-byte varint", func(m []byte) { copy(m[16:], bytes.Repeat([]byte{0x80}, 11)) }, ChunkToMove{}, RejectBadVarint},
		{"emulated short", nil, ChunkToMove{Data: []byte{1, 2, 3}}, RejectEmulatedSize},
		{"emulated huge", nil, ChunkToMove{Data: make([]byte, 65537)}, RejectEmulatedSize},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, _ := NewHeapSMB(4096, 4096)
			valid(s.Bytes())
			if c.mutate != nil {
				c.mutate(s.Bytes())
			}
			r := NewReader(s)
			delivered := 0
			r.ReadCommit(&CommitData{ChunksToMove: []ChunkToMove{c.move}}, func(*ChunkView) { delivered++ }, nil)
			st := r.Stats()
			if delivered != 0 || st.Rejected[c.want] != 1 || st.TotalRejected() != 1 {
				var names []string
				st.Each(func(n string, v uint64) {
					if v != 0 {
						names = append(names, n)
					}
				})
				t.Fatalf("delivered %d, counters %v; want only %v", delivered, names, c.want)
			}
			// A chunk taken for reading is freed even when rejected.
			if c.want == RejectBadWriterID || c.want == RejectFragmentOverrun || c.want == RejectBadVarint {
				if bm := s.PageBitmap(0); bm != 0 {
					t.Errorf("rejected chunk not freed: %#x", bm)
				}
			}
		})
	}
	// The untouched chunk passes.
	s, _ := NewHeapSMB(4096, 4096)
	valid(s.Bytes())
	r := NewReader(s)
	var v ChunkView
	r.ReadCommit(&CommitData{ChunksToMove: []ChunkToMove{{}}}, func(c *ChunkView) { v = *c; v.Payload = bytes.Clone(c.Payload) }, nil)
	if r.Stats().ChunksRead != 1 || v.Fragments != 2 || !bytes.Equal(v.Payload, []byte{2, 0x40, 1, 1, 0x50}) {
		t.Fatalf("valid chunk: %+v", v)
	}
}

func TestReaderPatchValidation(t *testing.T) {
	s, _ := NewHeapSMB(4096, 4096)
	r := NewReader(s)
	var got []uint32
	cd := &CommitData{ChunksToPatch: []ChunkToPatch{
		{WriterID: 0, ChunkID: 1, Patches: make([]Patch, 2)},
		{WriterID: 0x8000, ChunkID: 2, Patches: make([]Patch, 1)},
		{WriterID: 3, ChunkID: 3, Patches: make([]Patch, MaxPatchesPerChunk+1)},
		{WriterID: 3, ChunkID: 4, Patches: make([]Patch, 3), DiscardedPatches: 1},
	}}
	r.ReadCommit(cd, nil, func(p *ChunkToPatch) { got = append(got, p.ChunkID) })
	if len(got) != 1 || got[0] != 4 {
		t.Fatalf("delivered patch groups %v", got)
	}
	if d := r.Stats().PatchesDiscarded; d != 2+1+MaxPatchesPerChunk+1+1 {
		t.Fatalf("PatchesDiscarded %d", d)
	}
}

func TestReaderEmulatedChunk(t *testing.T) {
	s, _ := NewHeapSMB(4096, 4096)
	r := NewReader(s)
	data := make([]byte, 8, 64)
	ChunkHeader{ChunkID: 9, WriterID: 4, Count: 3, Flags: FlagLastPacketContinuesOnNextChunk}.Encode(data)
	data = append(data, 1, 0xaa, 2, 0xbb, 0xcc, 1, 0xdd)
	var views []ChunkView
	keep := func(v *ChunkView) { c := *v; c.Payload = bytes.Clone(v.Payload); views = append(views, c) }
	r.ReadCommit(&CommitData{ChunksToMove: []ChunkToMove{{Page: 5, Data: data}, {Data: data, ChunkIncomplete: true}}}, keep, nil)
	if len(views) != 2 || views[0].Fragments != 3 || views[0].Flags != 2 || !views[0].Complete ||
		views[1].Fragments != 2 || views[1].Flags != 0 || views[1].Complete || !bytes.Equal(views[1].Payload, data[8:13]) {
		t.Fatalf("views %+v", views)
	}
}

func TestSMBStateTransitions(t *testing.T) {
	s, _ := NewHeapSMB(2*4096, 4096)
	if !s.tryPartition(0, LayoutDiv4) || s.tryPartition(0, LayoutDiv1) {
		t.Fatal("partition must succeed once")
	}
	if _, ok := s.transition(0, 4, ChunkFree, ChunkBeingWritten); ok {
		t.Fatal("chunk 4 of a Div4 page accepted")
	}
	if _, ok := s.transition(0, 1, ChunkComplete, ChunkBeingRead); ok {
		t.Fatal("Free chunk acquired for reading")
	}
	for _, st := range []ChunkState{ChunkBeingWritten, ChunkComplete, ChunkBeingRead} {
		from := map[ChunkState]ChunkState{ChunkBeingWritten: ChunkFree, ChunkComplete: ChunkBeingWritten, ChunkBeingRead: ChunkComplete}[st]
		if _, ok := s.transition(0, 1, from, st); !ok {
			t.Fatalf("%v -> %v failed", from, st)
		}
	}
	if s.PageBitmap(0) != 0x30000008 {
		t.Fatalf("bitmap %#x", s.PageBitmap(0))
	}
	if !s.release(0, LayoutDiv4, 1) || s.PageBitmap(0) != 0 {
		t.Fatalf("page not freed after last chunk: %#x", s.PageBitmap(0))
	}
	if s.release(0, LayoutDiv4, 1) {
		t.Fatal("double release accepted")
	}
}
