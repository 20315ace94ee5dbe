package buffer

import "testing"

// Catalogue §14 "Fragments" (10-25) and the fragment scenarios added later
// (77, 78, 84, 85).

func TestFragments_Simple(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	scCopyLen(t, newChunk(t, b, 1, 1, 0).
		AddPacket(10, 'a', scFrom).AddPacket(20, 'b', 0).AddPacket(30, 'c', 0).AddPacket(10, 'd', scOn), 70+16)
	scCopyLen(t, newChunk(t, b, 1, 1, 1).AddPacket(20, 'e', scFrom).AddPacket(30, 'f', 0), 50+16)
	got := scPass(t, b, pk(20, 'b'), pk(30, 'c'), cat(pk(10, 'd'), pk(20, 'e')), pk(30, 'f'), scEOF)
	// test-vectors.md §5 (derived): the orphan 'a' is reported on 'b'.
	scDropped(t, got[0], LossPresent|LossOrphanContinuation)
	for _, p := range got[1:] {
		scDropped(t, p, 0)
	}
	// Records: 70 bytes -> 96, 50 bytes -> 80.
	scStats(t, b, map[string]uint64{"BytesWritten": 96 + 80, "ChunksWritten": 2, "ChunksRead": 2, "BytesRead": 176})
}

func TestFragments_EdgeCases(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(2, 'a', scFrom).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(2, 'b', scOn).Copy()
	scPass(t, b, scEOF)
	newChunk(t, b, 1, 1, 2).AddPacket(2, 'c', scFrom).Copy()
	scPass(t, b, cat(pk(2, 'b'), pk(2, 'c')), scEOF)
}

func TestFragments_OutOfOrderLastChunkIsMiddle(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(10, 'a', 0).Copy()
	newChunk(t, b, 1, 1, 2).AddPacket(30, 'c', 0).Copy()
	scStats(t, b, map[string]uint64{"ChunksCommittedOutOfOrder": 0})
	newChunk(t, b, 1, 1, 1).AddPacket(20, 'b', 0).Copy()
	scStats(t, b, map[string]uint64{"ChunksCommittedOutOfOrder": 1})
	got := scPass(t, b, pk(10, 'a'), pk(20, 'b'), pk(30, 'c'), scEOF)
	for _, p := range got {
		scDropped(t, p, 0)
	}
}

func TestFragments_OutOfOrderLastChunkIsMiddleFragmentation(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(10, 'a', scOn).Copy()
	newChunk(t, b, 1, 1, 2).AddPacket(30, 'c', scFrom).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(20, 'b', scBoth).Copy()
	got := scPass(t, b, cat(pk(10, 'a'), pk(20, 'b'), pk(30, 'c')), scEOF)
	scDropped(t, got[0], 0)
}

func TestFragments_OutOfOrderLastChunkIsMaxFragmentation(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(10, 'a', scOn).Copy()
	newChunk(t, b, 1, 1, 2).AddPacket(30, 'c', scFrom).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(20, 'b', scBoth).Copy()
	newChunk(t, b, 1, 1, 3).AddPacket(40, 'd', 0).Copy()
	scPass(t, b, cat(pk(10, 'a'), pk(20, 'b'), pk(30, 'c')), pk(40, 'd'), scEOF)
}

func TestFragments_OutOfOrderWithIdOverflowADCB(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0xFFFFFFFE).AddPacket(10, 'a', 0).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(40, 'd', 0).Copy()
	scPass(t, b, pk(10, 'a'))
	newChunk(t, b, 1, 1, 0).AddPacket(30, 'c', 0).Copy()
	newChunk(t, b, 1, 1, 0xFFFFFFFF).AddPacket(20, 'b', 0).Copy()
	got := scPass(t, b, pk(20, 'b'), pk(30, 'c'), pk(40, 'd'), scEOF)
	for _, p := range got {
		scDropped(t, p, 0)
	}
}

func TestFragments_OutOfOrderWithIdOverflowACBD(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0xFFFFFFFE).AddPacket(10, 'a', 0).Copy()
	newChunk(t, b, 1, 1, 0).AddPacket(30, 'c', 0).Copy()
	scPass(t, b, pk(10, 'a'))
	newChunk(t, b, 1, 1, 0xFFFFFFFF).AddPacket(20, 'b', 0).Copy()
	scPass(t, b, pk(20, 'b'), pk(30, 'c'))
	newChunk(t, b, 1, 1, 1).AddPacket(40, 'd', 0).Copy()
	got := scPass(t, b, pk(40, 'd'), scEOF)
	scDropped(t, got[0], 0)
}

func TestFragments_EmptyChunkBefore(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(10, 'a', 0).AddPacket(20, 'b', scOn).Copy()
	newChunk(t, b, 1, 1, 2).AddPacket(30, 'c', scFrom).AddPacket(40, 'd', scOn).Copy()
	scPass(t, b, pk(10, 'a'), cat(pk(20, 'b'), pk(30, 'c')), scEOF)
}

func TestFragments_EmptyChunkAfter(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(10, 'a', 0).AddPacket(10, 'b', scOn).Copy()
	newChunk(t, b, 1, 1, 1).Copy()
	scPass(t, b, pk(10, 'a'), scEOF)
}

func TestFragments_EmptyChunkInTheMiddle(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(10, 'a', scOn).Copy()
	newChunk(t, b, 1, 1, 1).Copy()
	newChunk(t, b, 1, 1, 2).AddPacket(10, 'b', scFrom).AddPacket(20, 'c', 0).Copy()
	scPass(t, b, cat(pk(10, 'a'), pk(10, 'b')), pk(20, 'c'), scEOF)
}

func TestFragments_LongPackets(t *testing.T) {
	for l := 1; l <= 10; l++ {
		b := scNew(t, 4096, RingBuffer)
		want := []string{pk(20, 'b')}
		newChunk(t, b, 1, 1, 0).AddPacket(10, 'a', 0).AddPacket(20, 'b', scOn).Copy()
		for i := 1; i <= l; i++ {
			c := 'b' + byte(i)
			want = append(want, pk(20+i, c))
			newChunk(t, b, 1, 1, uint32(i)).AddPacket(20+i, c, scBoth).Copy()
		}
		want = append(want, pk(30, 'y'))
		newChunk(t, b, 1, 1, uint32(l+1)).AddPacket(30, 'y', scFrom).AddPacket(50, 'z', 0).Copy()

		b.BeginRead()
		scNext(t, b, pk(10, 'a'))
		p, ok := scRaw(b)
		if !ok {
			t.Fatalf("L=%d: long packet missing", l)
		}
		if len(p.Slices) != l+2 {
			t.Fatalf("L=%d: long packet has %d slices, want %d", l, len(p.Slices), l+2)
		}
		for i, s := range p.Slices {
			if string(s) != want[i] {
				t.Fatalf("L=%d: slice %d = %s, want %s", l, i, scShow(string(s)), scShow(want[i]))
			}
		}
		if p.Size() != len(cat(want...)) {
			t.Fatalf("L=%d: Size() %d, want %d", l, p.Size(), len(cat(want...)))
		}
		scNext(t, b, pk(50, 'z'), scEOF)
	}
}

// As written in Perfetto the loop starting at 0xFFFFFFFE with `id <= 2`
// never runs, so the scenario only checks that an empty buffer reads ∅
// (the intended wrap-around case is Fragments_ChunkIdMaxWraparoundFragmentation).
func TestFragments_LongPacketWithWrappingID(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	scPass(t, b, scEOF)
}

func TestFragments_PreserveUID(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	c := newChunk(t, b, 1, 1, 0).AddPacket(10, 'a', 0).AddPacket(10, 'b', scOn)
	c.client.UID = 11
	c.Copy()
	c = newChunk(t, b, 2, 1, 0).AddPacket(10, 'c', 0).AddPacket(10, 'd', 0)
	c.client.UID = 22
	c.Copy()
	c = newChunk(t, b, 1, 1, 1).AddPacket(10, 'e', scFrom).AddPacket(10, 'f', 0)
	c.client.UID = 11
	c.Copy()

	type exp struct {
		data string
		uid  int32
		p    uint16
	}
	want := []exp{
		{pk(10, 'a'), 11, 1}, {cat(pk(10, 'b'), pk(10, 'e')), 11, 1},
		{pk(10, 'c'), 22, 2}, {pk(10, 'd'), 22, 2}, {pk(10, 'f'), 11, 1},
	}
	b.BeginRead()
	for i, e := range want {
		p, ok := scRaw(b)
		if !ok {
			t.Fatalf("read #%d: got ∅, want %s", i, scShow(e.data))
		}
		if d := string(p.AppendTo(nil)); d != e.data || p.Seq.Client.UID != e.uid || p.Seq.ProducerID != e.p || p.Seq.WriterID != 1 {
			t.Fatalf("read #%d: got %s uid %d (%d,%d), want %s uid %d (%d,1)",
				i, scShow(d), p.Seq.Client.UID, p.Seq.ProducerID, p.Seq.WriterID, scShow(e.data), e.uid, e.p)
		}
	}
	scNext(t, b, scEOF)
}

func TestFragments_DiscardedOnPacketSizeDropPacket(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(10, 'a', 0).AddPacket(10, 'b', scOn).Copy()
	newChunk(t, b, 1, 1, 1).SetFlags(scFrom).AddPacketBytes([]byte{0xff, 0xff, 0xff, 0x7f}, 0).Copy()
	newChunk(t, b, 1, 1, 2).AddPacket(10, 'd', 0).Copy()
	scPass(t, b, pk(10, 'a'), pk(10, 'd'), scEOF)
	scStats(t, b, map[string]uint64{"TraceWriterPacketLoss": 1, "AbiViolations": 0})
}

func TestFragments_PacketSizeDropPacketIsNotAbiViolation(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(10, 'a', 0).AddPacketBytes([]byte{0xff, 0xff, 0xff, 0x7f}, 0).Copy()
	scPass(t, b, pk(10, 'a'), scEOF)
	scStats(t, b, map[string]uint64{"AbiViolations": 0, "TraceWriterPacketLoss": 1})
}

func TestFragments_IncompleteChunkNeedsPatching(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', scOn|scPatch).PadTo(512).Incomplete().Copy()
	scPass(t, b, pk(20, 'a'), scEOF)
}

func TestFragments_ChunkIdMaxWraparoundFragmentation(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	ids := []uint32{0xFFFFFFFE, 0xFFFFFFFF, 0, 1, 2}
	var want []string
	for i, id := range ids {
		flags := scBoth
		switch i {
		case 0:
			flags = scOn
		case len(ids) - 1:
			flags = scFrom
		}
		newChunk(t, b, 1, 1, id).AddPacket(10, 'a'+byte(i), flags).Copy()
		want = append(want, pk(10, 'a'+byte(i)))
	}
	b.BeginRead()
	p, ok := scRaw(b)
	if !ok || len(p.Slices) != 5 || string(p.AppendTo(nil)) != cat(want...) {
		t.Fatalf("got ok=%v %d slices %s, want 5 slices %s", ok, len(p.Slices), scShow(string(p.AppendTo(nil))), scShow(cat(want...)))
	}
	if p.PreviousPacketDropped != 0 {
		t.Fatalf("dropped %d, want 0", p.PreviousPacketDropped)
	}
	scNext(t, b, scEOF)
}

func TestAlignment_ExactBufferBoundaryFragmentation(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	scCopyLen(t, newChunk(t, b, 1, 1, 0).AddPacket(2016, 'a', scOn), 2032)
	scCopyLen(t, newChunk(t, b, 1, 1, 1).AddPacket(2032, 'b', scFrom), 2048)
	scPass(t, b, cat(pk(2016, 'a'), pk(2032, 'b')), scEOF)
}

func TestFragments_LargeFragment(t *testing.T) {
	b := scNew(t, 8192, RingBuffer)
	var want []string
	for i := 0; i < 10; i++ {
		flags := scBoth
		switch i {
		case 0:
			flags = scOn
		case 9:
			flags = scFrom
		}
		newChunk(t, b, 1, 1, uint32(i)).AddPacket(50, 'a'+byte(i), flags).Copy()
		want = append(want, pk(50, 'a'+byte(i)))
	}
	b.BeginRead()
	p, ok := scRaw(b)
	if !ok || len(p.Slices) != 10 || string(p.AppendTo(nil)) != cat(want...) {
		t.Fatalf("got ok=%v %d slices, want one 10-fragment packet", ok, len(p.Slices))
	}
	scNext(t, b, scEOF)
}

func TestFragments_EmptyChunksInLongChain(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', scOn).Copy()
	newChunk(t, b, 1, 1, 1).Copy()
	newChunk(t, b, 1, 1, 2).AddPacket(20, 'b', scBoth).Copy()
	newChunk(t, b, 1, 1, 3).Copy()
	newChunk(t, b, 1, 1, 4).AddPacket(20, 'c', scFrom).Copy()
	scPass(t, b, cat(pk(20, 'a'), pk(20, 'b'), pk(20, 'c')), scEOF)
}
