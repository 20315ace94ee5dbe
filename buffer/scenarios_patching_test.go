package buffer

import "testing"

// Catalogue §14 "Patching" (26-30) and the later patch scenarios (81, 95).

func TestPatching_Simple(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(100, 'a', 0).Copy()
	newChunk(t, b, 2, 1, 0).AddPacket(9, 'b', 0).ClearBytes(5, 4).Copy()
	newChunk(t, b, 3, 1, 0).AddPacket(100, 'c', 0).Copy()
	if !b.TryPatchChunkContents(2, 1, 0, []Patch{scPatchOf(5, "YMCA")}, false) {
		t.Fatal("patch (2,1,0)@5 failed")
	}
	scPass(t, b, pk(100, 'a'), "b00-YMCA", pk(100, 'c'), scEOF)
	scStats(t, b, map[string]uint64{"PatchesSucceeded": 1, "PatchesFailed": 0})
}

func TestPatching_SkipIfChunkDoesntExist(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(100, 'a', 0).Copy()
	for _, k := range []struct {
		p, w uint16
		c    uint32
	}{{1, 2, 0}, {1, 1, 1}, {1, 1, 0xFFFFFFFF}} {
		if b.TryPatchChunkContents(k.p, k.w, k.c, []Patch{scPatchOf(0, "XXXX")}, false) {
			t.Fatalf("patch of absent chunk (%d,%d,%d) succeeded", k.p, k.w, k.c)
		}
	}
	scPass(t, b, pk(100, 'a'), scEOF)
	scStats(t, b, map[string]uint64{"PatchesFailed": 3, "PatchesSucceeded": 0})
}

func TestPatching_AtBoundariesOfChunk(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(100, 'a', scOn).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(16, 'b', scBoth).ClearBytes(1, 4).ClearBytes(12, 4).Copy()
	newChunk(t, b, 1, 1, 2).AddPacket(100, 'c', scFrom).Copy()
	if !b.TryPatchChunkContents(1, 1, 1, []Patch{scPatchOf(1, "PERF"), scPatchOf(12, "ETTO")}, false) {
		t.Fatal("patch failed")
	}
	scPass(t, b, cat(pk(100, 'a'), "PERFb01-b02ETTO", pk(100, 'c')), scEOF)
	scStats(t, b, map[string]uint64{"PatchesSucceeded": 2})
}

func TestPatching_ReadWaitsForPatchComplete(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	// seq1: blocked forever.
	newChunk(t, b, 1, 1, 0).AddPacket(16, 'a', scPatch|scOn).ClearBytes(1, 4).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(16, 'b', scFrom).Copy()
	// seq2.
	newChunk(t, b, 2, 1, 0).AddPacket(16, 'c', 0).Copy()
	newChunk(t, b, 2, 1, 1).AddPacket(16, 'd', scPatch|scOn).ClearBytes(1, 4).Copy()
	newChunk(t, b, 2, 1, 2).AddPacket(16, 'e', scFrom).Copy()
	// seq3.
	newChunk(t, b, 3, 1, 0).AddPacket(16, 'f', scPatch|scOn).ClearBytes(1, 8).Copy()
	newChunk(t, b, 3, 1, 1).AddPacket(1, 'g', scFrom).Copy()

	scPass(t, b, pk(16, 'c'), scEOF)

	if !b.TryPatchChunkContents(2, 1, 1, []Patch{scPatchOf(1, "PATC")}, false) {
		t.Fatal("patch seq2 failed")
	}
	scPass(t, b, cat("PATCd01-d02-d03", pk(16, 'e')), scEOF)

	if !b.TryPatchChunkContents(3, 1, 0, []Patch{scPatchOf(1, "PERF")}, true) {
		t.Fatal("patch seq3 #1 failed")
	}
	scPass(t, b, scEOF)
	if !b.TryPatchChunkContents(3, 1, 0, []Patch{scPatchOf(5, "ETTO")}, false) {
		t.Fatal("patch seq3 #2 failed")
	}
	scPass(t, b, "PERFETTOf02-f03", scEOF)
}

func TestPendingPatchesDataLossOnOverwrite(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(1024, 'a', scOn|scPatch).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(1024, 'b', scFrom).Copy()
	scPass(t, b, scEOF)
	newChunk(t, b, 1, 1, 2).AddPacket(2000, 'c', 0).Copy()
	newChunk(t, b, 1, 1, 3).AddPacket(2000, 'd', 0).Copy()
	got := scPass(t, b, pk(2000, 'c'), pk(2000, 'd'), scEOF)
	scDroppedNonZero(t, got[0])
	// Derived in the catalogue: PRESENT|ORPHAN_CONTINUATION|OVERWRITE.
	scDropped(t, got[0], LossPresent|LossOrphanContinuation|LossOverwrite)
	scDropped(t, got[1], 0)
}

func TestPatching_OutOfOrderPatchesWithFragmentation(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(100, 'a', scOn|scPatch).ClearBytes(50, 4).Copy()
	newChunk(t, b, 1, 1, 2).AddPacket(100, 'c', scFrom).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(100, 'b', scBoth|scPatch).ClearBytes(50, 4).Copy()
	if !b.TryPatchChunkContents(1, 1, 1, []Patch{scPatchOf(50, "BBBB")}, false) {
		t.Fatal("patch chunk1 failed")
	}
	scPass(t, b, scEOF)
	if !b.TryPatchChunkContents(1, 1, 0, []Patch{scPatchOf(50, "AAAA")}, false) {
		t.Fatal("patch chunk0 failed")
	}
	b.BeginRead()
	p, ok := scRaw(b)
	if !ok || len(p.Slices) != 3 {
		t.Fatalf("got ok=%v with %d slices, want one 3-fragment packet", ok, len(p.Slices))
	}
	// Chunk offset 50 = payload offset 49 (one header byte).
	want := []string{scWithPatch(100, 'a', 49, "AAAA"), scWithPatch(100, 'b', 49, "BBBB"), pk(100, 'c')}
	for i, s := range p.Slices {
		if string(s) != want[i] {
			t.Fatalf("slice %d = %s, want %s", i, scShow(string(s)), scShow(want[i]))
		}
	}
	scNext(t, b, scEOF)
}

func TestBytesOverwritten_PendingPatchChunkOverwrittenIsCounted(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(1008, 'a', scOn|scPatch).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(1008, 'b', scFrom).Copy()
	scPass(t, b, scEOF)
	scCopyLen(t, newChunk(t, b, 2, 1, 0).AddPacket(2032, 'x', 0), 2048)
	scCopyLen(t, newChunk(t, b, 3, 1, 0).AddPacket(2032, 'y', 0), 2048)
	scStats(t, b, map[string]uint64{"WriteWrapCount": 1, "ChunksOverwritten": 2, "BytesOverwritten": 2048})
}
