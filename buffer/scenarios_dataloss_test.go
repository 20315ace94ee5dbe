package buffer

import "testing"

// Catalogue §14 "Data-loss attribution" (31-35), chunk-gap detection
// (73-75, 86), overwrite accounting (32, 65, 66, 76, 87, 92-94, 96).

func TestDataLoss_ReadGap(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(32, 'a', 0).Copy()
	got := scPass(t, b, pk(32, 'a'))
	scDropped(t, got[0], 0)
	newChunk(t, b, 1, 1, 2).AddPacket(32, 'b', 0).Copy()
	got = scPass(t, b, pk(32, 'b'))
	scDropped(t, got[0], LossPresent|LossReadGap)
}

func TestDataLoss_OverwriteVsChunkCount(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	for i := 0; i < 16; i++ {
		newChunk(t, b, 1, 1, uint32(i)).AddPacket(400, 'x', 0).Copy()
	}
	if st := b.Stats(); st.ChunksOverwritten < 2 {
		t.Fatalf("ChunksOverwritten %d, want >= 2", st.ChunksOverwritten)
	}
	got := scDrain(b)
	if len(got) == 0 {
		t.Fatal("no survivors")
	}
	for i, p := range got {
		if p.Data != pk(400, 'x') {
			t.Fatalf("survivor %d: %s", i, scShow(p.Data))
		}
		if i == 0 {
			scDropped(t, p, LossPresent|LossOverwrite)
		} else {
			scDropped(t, p, 0)
		}
	}
}

func TestDataLoss_OrphanContinuation(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(32, 'a', scFrom).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(32, 'b', 0).Copy()
	got := scPass(t, b, pk(32, 'b'), scEOF)
	scDropped(t, got[0], LossPresent|LossOrphanContinuation)
}

func TestDataLoss_ReassemblyBrokenChain(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(32, 'a', scOn).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(32, 'b', 0).Copy()
	got := scPass(t, b, pk(32, 'b'), scEOF)
	scDropped(t, got[0], LossPresent|LossReassemblyBrokenChain)
}

func TestDataLoss_ReassemblyGap(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(32, 'a', scOn).Copy()
	newChunk(t, b, 1, 1, 2).AddPacket(32, 'b', scFrom).Copy()
	newChunk(t, b, 1, 1, 3).AddPacket(32, 'c', 0).Copy()
	got := scPass(t, b, pk(32, 'c'), scEOF)
	scDropped(t, got[0], LossPresent|LossReadGap|LossReassemblyGap|LossOrphanContinuation)
}

func TestNoDataLossIfReaderCatchesUp(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	for w := uint16(0); w < 3; w++ {
		newChunk(t, b, 1, w, 0).AddPacket(2000, 'a', 0).Copy()
		newChunk(t, b, 1, w, 1).AddPacket(1000, 'b', 0).Copy()
		scDropped(t, scPass(t, b, pk(2000, 'a'))[0], 0)
		newChunk(t, b, 1, w, 2).AddPacket(2000, 'c', 0).Copy()
		scDropped(t, scPass(t, b, pk(1000, 'b'))[0], 0)
		newChunk(t, b, 1, w, 3).AddPacket(2000, 'd', 0).Copy()
		got := scPass(t, b, pk(2000, 'c'), pk(2000, 'd'), scEOF)
		scDropped(t, got[0], 0)
		scDropped(t, got[1], 0)
	}
	scStats(t, b, map[string]uint64{"ChunksOverwritten": 0, "BytesOverwritten": 0})
}

func TestPacketDropOnOverwrite(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(10, 'a', 0).Copy()
	scDropped(t, scPass(t, b, pk(10, 'a'))[0], 0)
	newChunk(t, b, 1, 1, 2).AddPacket(2000, 'b', 0).Copy()
	newChunk(t, b, 1, 1, 3).AddPacket(3000, 'c', 0).Copy()
	got := scPass(t, b, pk(3000, 'c'), scEOF)
	scDroppedNonZero(t, got[0])
}

func TestChunkGaps_WithinSameReadCycle(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	for _, id := range []uint32{1, 3, 4, 6} {
		newChunk(t, b, 1, 1, id).AddPacket(16, 'a'+byte(id-1), 0).Copy()
	}
	got := scPass(t, b, pk(16, 'a'), pk(16, 'c'), pk(16, 'd'), pk(16, 'f'), scEOF)
	scDropped(t, got[0], 0)
	scDroppedNonZero(t, got[1])
	scDropped(t, got[2], 0)
	scDroppedNonZero(t, got[3])
}

func TestChunkGaps_AcrossReadCycles(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 1).AddPacket(16, 'a', 0).Copy()
	scPass(t, b, pk(16, 'a'), scEOF)
	newChunk(t, b, 1, 1, 2).AddPacket(16, 'b', 0).Copy()
	scDropped(t, scPass(t, b, pk(16, 'b'), scEOF)[0], 0)
	newChunk(t, b, 1, 1, 4).AddPacket(16, 'd', 0).Copy()
	scDroppedNonZero(t, scPass(t, b, pk(16, 'd'), scEOF)[0])
	newChunk(t, b, 1, 1, 5).AddPacket(16, 'e', 0).Copy()
	scDropped(t, scPass(t, b, pk(16, 'e'), scEOF)[0], 0)
}

func TestChunkGaps_EvenIfSequenceDisappears(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 1).AddPacket(16, 'a', 0).Copy()
	scPass(t, b, pk(16, 'a'))
	scCopyLen(t, newChunk(t, b, 42, 1, 1).AddPacket(4080, 'x', 0), 4096)
	scCopyLen(t, newChunk(t, b, 42, 1, 2).AddPacket(4080, 'y', 0), 4096)
	newChunk(t, b, 1, 1, 2).AddPacket(16, 'b', 0).Copy()
	scDropped(t, scPass(t, b, pk(16, 'b'), scEOF)[0], 0)
	scCopyLen(t, newChunk(t, b, 42, 1, 3).AddPacket(4080, 'x', 0), 4096)
	scCopyLen(t, newChunk(t, b, 42, 1, 4).AddPacket(4080, 'y', 0), 4096)
	newChunk(t, b, 1, 1, 4).AddPacket(16, 'd', 0).Copy()
	scDroppedNonZero(t, scPass(t, b, pk(16, 'd'), scEOF)[0])
}

func TestSequenceGaps_DetectionWithChunkIdWrap(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0xFFFFFFFE).AddPacket(16, 'a', 0).Copy()
	scPass(t, b, pk(16, 'a'))
	newChunk(t, b, 1, 1, 0xFFFFFFFF).AddPacket(16, 'b', 0).Copy()
	newChunk(t, b, 1, 1, 0).AddPacket(16, 'c', 0).Copy()
	got := scPass(t, b, pk(16, 'b'), pk(16, 'c'))
	scDropped(t, got[0], 0)
	scDropped(t, got[1], 0)
	newChunk(t, b, 1, 1, 3).AddPacket(16, 'd', 0).Copy()
	scDroppedNonZero(t, scPass(t, b, pk(16, 'd'))[0])
}

func TestWrapAroundWithIncompleteChunk(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	for id := uint32(1); id <= 3; id++ {
		c := newChunk(t, b, 1, 1, id).AddPacket(1008, '0'+byte(id), 0)
		if id == 2 {
			c.Incomplete()
		}
		scCopyLen(t, c, 1024)
	}
	for id := uint32(4); id <= 6; id++ {
		scCopyLen(t, newChunk(t, b, 1, 1, id).AddPacket(1008, '0'+byte(id), 0), 1024)
	}
	scPass(t, b, pk(1008, '3'), pk(1008, '4'), pk(1008, '5'), pk(1008, '6'), scEOF)
}

func TestOverwrite_SizeDiffLessThanChunkHeader(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).Copy() // record 48
	rest := 4096 - 48 - 16
	newChunk(t, b, 1, 1, 1).AddPacket(rest, 'b', 0).Copy() // record 4048
	if b.UsedSize() != 4096 {
		t.Fatalf("UsedSize %d, want 4096", b.UsedSize())
	}
	newChunk(t, b, 1, 1, 2).AddPacket(16, 'c', 0).Copy() // record 32, leaves 16-byte padding
	scPass(t, b, pk(rest, 'b'), pk(16, 'c'), scEOF)
	scStats(t, b, map[string]uint64{"PaddingBytesWritten": 16, "ChunksOverwritten": 1, "BytesOverwritten": 48})
}

func TestBytesOverwritten_ConsumedWholePacketCountedAsLost(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(496, 'a', 0).Copy()
	scPass(t, b, pk(496, 'a'))
	scStats(t, b, map[string]uint64{"BytesRead": 512, "ChunksOverwritten": 0, "BytesOverwritten": 0})
	newChunk(t, b, 1, 2, 0).AddPacket(1008, 'b', 0).Copy()
	newChunk(t, b, 1, 2, 1).AddPacket(1008, 'c', 0).Copy()
	newChunk(t, b, 1, 3, 0).AddPacket(2032, 'd', 0).Copy()
	scStats(t, b, map[string]uint64{"WriteWrapCount": 1, "ChunksOverwritten": 2, "BytesOverwritten": 2048})
}

func TestBytesOverwritten_ConsumedFragmentedPacketCountedAsLost(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(496, 'a', scOn).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(496, 'b', scBoth).Copy()
	newChunk(t, b, 1, 1, 2).AddPacket(496, 'c', scFrom).Copy()
	scPass(t, b, cat(pk(496, 'a'), pk(496, 'b'), pk(496, 'c')))
	scStats(t, b, map[string]uint64{"BytesRead": 1536})
	newChunk(t, b, 1, 2, 0).AddPacket(2032, 'd', 0).Copy()
	newChunk(t, b, 1, 3, 0).AddPacket(1520, 'e', 0).Copy()
	scStats(t, b, map[string]uint64{"WriteWrapCount": 1, "ChunksOverwritten": 0, "BytesOverwritten": 0})
}

func TestBytesOverwritten_ConsumedChunkSurvivesBeginReadBoundary(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(496, 'a', 0).Copy()
	scPass(t, b, pk(496, 'a'))
	scStats(t, b, map[string]uint64{"BytesRead": 512})
	b.BeginRead()
	newChunk(t, b, 1, 2, 0).AddPacket(1008, 'b', 0).Copy()
	newChunk(t, b, 1, 2, 1).AddPacket(1008, 'c', 0).Copy()
	newChunk(t, b, 1, 3, 0).AddPacket(2032, 'd', 0).Copy()
	scStats(t, b, map[string]uint64{"WriteWrapCount": 1, "ChunksOverwritten": 2, "BytesOverwritten": 2048})
}

func TestNoOverwriteCountIfReaderCatchesUp(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(2000, 'a', 0).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(1000, 'b', 0).Copy()
	scPass(t, b, pk(2000, 'a'))
	newChunk(t, b, 1, 1, 2).AddPacket(2000, 'c', 0).Copy()
	scStats(t, b, map[string]uint64{"ChunksOverwritten": 0, "BytesOverwritten": 0, "WriteWrapCount": 1})
	got := scPass(t, b, pk(1000, 'b'), pk(2000, 'c'), scEOF)
	scDropped(t, got[0], 0)
	scDropped(t, got[1], 0)
}
