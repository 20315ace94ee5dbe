package buffer

import "testing"

// Catalogue §14 "Policies, loss, clone" (64, 67-72, 79, 80, 83) and the
// V1-only scenarios that V2 keeps with its own semantics
// (MissingPacketsOnSequence, Clone_NoFragments_PreserveReadIter).

func TestDiscardPolicy(t *testing.T) {
	b := scNew(t, 4096, Discard)
	scCopyLen(t, newChunk(t, b, 1, 1, 0).AddPacket(32-16, 'a', 0), 32)
	scCopyLen(t, newChunk(t, b, 1, 1, 1).AddPacket(4000-16, 'b', 0), 4000)
	scPass(t, b, pk(32-16, 'a'))
	scCopyLen(t, newChunk(t, b, 1, 1, 2).AddPacket(32-16, 'c', 0), 32)
	scStats(t, b, map[string]uint64{"ChunksDiscarded": 0, "ChunksWritten": 3})
	newChunk(t, b, 1, 1, 3).AddPacket(48-16, 'd', 0).Copy()
	newChunk(t, b, 1, 1, 4).AddPacket(48-16, 'e', 0).Copy()
	scStats(t, b, map[string]uint64{"ChunksDiscarded": 2, "ChunksWritten": 3})
	scPass(t, b, pk(4000-16, 'b'), pk(32-16, 'c'), scEOF)
	for w := uint16(2); w < 5; w++ {
		newChunk(t, b, 1, w, 0).AddPacket(32-16, 'X', 0).Copy()
	}
	scPass(t, b, scEOF)
	scStats(t, b, map[string]uint64{"ChunksDiscarded": 5, "ChunksWritten": 3, "WriteWrapCount": 0, "ChunksOverwritten": 0})
}

func TestDiscardPolicy_FillsExactlyThenDiscards(t *testing.T) {
	b := scNew(t, 4096, Discard)
	scCopyLen(t, newChunk(t, b, 1, 1, 0).AddPacket(2030, 'a', 0), 2046)
	scCopyLen(t, newChunk(t, b, 1, 1, 1).AddPacket(2030, 'b', 0), 2046)
	newChunk(t, b, 1, 1, 2).AddPacket(2030, 'c', 0).Copy()
	scPass(t, b, pk(2030, 'a'), pk(2030, 'b'), scEOF)
	scStats(t, b, map[string]uint64{"ChunksDiscarded": 1, "ChunksWritten": 2})
}

func TestWriteWrapCount(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(2030, 'a', 0).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(2030, 'b', 0).Copy()
	scStats(t, b, map[string]uint64{"WriteWrapCount": 0})
	newChunk(t, b, 1, 1, 2).AddPacket(3054, 'c', 0).Copy()
	scStats(t, b, map[string]uint64{"WriteWrapCount": 1})
	newChunk(t, b, 1, 1, 3).AddPacket(2030, 'd', 0).Copy()
	scStats(t, b, map[string]uint64{"WriteWrapCount": 2})
}

func TestDiscardMode_FragmentedPacketAtBoundary(t *testing.T) {
	b := scNew(t, 4096, Discard)
	newChunk(t, b, 1, 1, 0).AddPacket(2000, 'a', 0).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(1500, 'b', 0).Copy()
	newChunk(t, b, 1, 1, 2).AddPacket(200, 'c', 0).AddPacket(150, 'd', 0).AddPacket(100, 'e', scOn).Copy()
	newChunk(t, b, 1, 1, 3).AddPacket(500, 'f', scFrom).Copy()
	scStats(t, b, map[string]uint64{"ChunksDiscarded": 1, "ChunksWritten": 3})
	scPass(t, b, pk(2000, 'a'), pk(1500, 'b'), pk(200, 'c'), pk(150, 'd'), scEOF)
}

func TestClone_NoFragments(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	for c := byte('A'); c <= 'C'; c++ {
		scCopyLen(t, newChunk(t, b, 0, uint16(c), 0).AddPacket(16, c, 0), 32)
	}
	cl := b.CloneReadOnly()
	// "Source destroyed": drain and overwrite the source; the clone must
	// not share its memory.
	scPass(t, b, pk(16, 'A'), pk(16, 'B'), pk(16, 'C'), scEOF)
	for i := uint32(0); i < 4; i++ {
		newChunk(t, b, 9, 9, i).AddPacket(1008, 'z', 0).Copy()
	}
	if cl.UsedSize() != 96 {
		t.Fatalf("clone UsedSize %d, want 96", cl.UsedSize())
	}
	got := scPass(t, cl, pk(16, 'A'), pk(16, 'B'), pk(16, 'C'), scEOF)
	for i, p := range got {
		if p.P != 0 || p.W != uint16('A'+i) {
			t.Fatalf("clone packet %d from (%d,%d)", i, p.P, p.W)
		}
	}
}

// V1's PreserveReadIter variant: V2 always preserves reads made on the
// source before cloning.
func TestClone_NoFragments_PreserveReadIter(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	for c := byte('A'); c <= 'C'; c++ {
		newChunk(t, b, 0, uint16(c), 0).AddPacket(16, c, 0).Copy()
	}
	scPass(t, b, pk(16, 'A'), pk(16, 'B'))
	cl := b.CloneReadOnly()
	scPass(t, cl, pk(16, 'C'), scEOF)
	// The source's own state is not disturbed by the clone.
	scPass(t, b, pk(16, 'C'), scEOF)
}

func TestClone_FragmentsOutOfOrder(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(10, 'a', 0).AddPacket(10, '_', 0).Incomplete().Copy()
	newChunk(t, b, 1, 1, 2).AddPacket(30, 'd', 0).Copy()
	scPass(t, b.CloneReadOnly(), pk(10, 'a'), scEOF)
	newChunk(t, b, 1, 1, 1).AddPacket(20, 'c', 0).Copy()
	newChunk(t, b, 1, 1, 0).AddPacket(10, 'a', 0).AddPacket(10, 'b', 0).Copy()
	scPass(t, b.CloneReadOnly(), pk(10, 'a'), pk(10, 'b'), pk(20, 'c'), pk(30, 'd'), scEOF)
}

func TestClone_WithPatches(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(100, 'a', 0).Copy()
	newChunk(t, b, 2, 1, 0).AddPacket(9, 'b', 0).ClearBytes(5, 4).Copy()
	newChunk(t, b, 3, 1, 0).AddPacket(100, 'c', 0).Copy()
	if !b.TryPatchChunkContents(2, 1, 0, []Patch{scPatchOf(5, "YMCA")}, false) {
		t.Fatal("patch failed")
	}
	cl := b.CloneReadOnly()
	scPass(t, cl, pk(100, 'a'), "b00-YMCA", pk(100, 'c'), scEOF)
	st := cl.Stats()
	if st.PatchesSucceeded != 1 || st.ChunksWritten != 3 || st.ChunksRead != 3 {
		t.Fatalf("clone stats: patches %d written %d read %d", st.PatchesSucceeded, st.ChunksWritten, st.ChunksRead)
	}
}

func TestClone_Wrapping(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	for w := uint16(0); w < 6; w++ {
		scCopyLen(t, newChunk(t, b, 1, w, 0).AddPacket(1008, 'a'+byte(w), 0), 1024)
	}
	cl := b.CloneReadOnly()
	if cl.UsedSize() != cl.Size() {
		t.Fatalf("clone UsedSize %d, want %d", cl.UsedSize(), cl.Size())
	}
	scPass(t, cl, pk(1008, 'c'), pk(1008, 'd'), pk(1008, 'e'), pk(1008, 'f'), scEOF)
}

func TestClone_WrappingWithPadding(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 0, 0).AddPacket(2048, 'a', 0).Copy()
	newChunk(t, b, 1, 1, 0).AddPacket(3192, 'b', 0).Copy()
	cl := b.CloneReadOnly()
	if cl.UsedSize() != 3216 {
		t.Fatalf("clone UsedSize %d, want 3216", cl.UsedSize())
	}
	scPass(t, cl, pk(3192, 'b'), scEOF)
}

// Residency of pages cannot be observed portably from Go; the observable
// part of the scenario is that the clone has the source's used size and
// content (the clone copies only [0, UsedSize)).
func TestClone_CommitOnlyUsedSize(t *testing.T) {
	b := scNew(t, 32*4096, RingBuffer)
	newChunk(t, b, 1, 0, 0).AddPacket(1024, 'a', 0).Copy()
	cl := b.CloneReadOnly()
	if cl.UsedSize() != b.UsedSize() || cl.Size() != b.Size() {
		t.Fatalf("clone used/size %d/%d, source %d/%d", cl.UsedSize(), cl.Size(), b.UsedSize(), b.Size())
	}
	scCheckZeroTail(t, cl)
	scPass(t, cl, pk(1024, 'a'), scEOF)
}

// The V1 test flagged the first packet of every sequence as dropped; V2
// does not (trace-buffer-v2.md §8), so this is the V2 form of the scenario.
func TestMissingPacketsOnSequence(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(10, 'a', 0).AddPacket(10, 'b', 0).AddPacket(10, 'c', scOn).Copy()
	newChunk(t, b, 2, 1, 0).AddPacket(10, 'u', 0).AddPacket(10, 'v', 0).AddPacket(10, 'w', 0).ClearBytes(10, 1).Copy()
	got := scPass(t, b, pk(10, 'a'), pk(10, 'b'), pk(10, 'u'), scEOF)
	for _, p := range got {
		scDropped(t, p, 0) // first packets of a sequence are not flagged in V2
	}
	scStats(t, b, map[string]uint64{"AbiViolations": 1})

	newChunk(t, b, 2, 1, 1).AddPacket(10, 'x', 0).AddPacket(10, 'y', 0).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(10, 'd', scFrom).AddPacket(10, 'e', 0).Copy()
	got = scPass(t, b, cat(pk(10, 'c'), pk(10, 'd')), pk(10, 'x'), pk(10, 'y'), pk(10, 'e'), scEOF)
	scDropped(t, got[0], 0)
	scDropped(t, got[2], 0)
	scDropped(t, got[3], 0)

	newChunk(t, b, 1, 1, 2).AddPacket(2000, 'f', 0).Copy()
	newChunk(t, b, 1, 1, 3).AddPacket(3000, 'g', 0).Copy()
	scDroppedNonZero(t, scPass(t, b, pk(3000, 'g'))[0])
	newChunk(t, b, 2, 1, 2).AddPacket(10, 'z', 0).Copy()
	scPass(t, b, pk(10, 'z'))
}
