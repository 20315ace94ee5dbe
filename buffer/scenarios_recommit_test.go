package buffer

import "testing"

// Catalogue §14 "Scrape + recommit" (36-39), "Recommit (Override)" (53-63)
// and the later recommit / re-scrape scenarios (82, 88-91, 97, 98).

func TestScrapedChunkRecommit_RelocateToWritePos(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(32, 'a', 0).AddPacket(32, 'b', 0).PadTo(512).Incomplete().Copy()
	scPass(t, b, pk(32, 'a'), scEOF)
	for id := uint32(0); id < 3; id++ {
		scCopyLen(t, newChunk(t, b, 2, 2, id).AddPacket(1008, 'x', 0), 1024)
	}
	scCopyLen(t, newChunk(t, b, 2, 2, 3).AddPacket(496, 'y', 0), 512)
	scPass(t, b, pk(1008, 'x'), pk(1008, 'x'), pk(1008, 'x'), pk(496, 'y'), scEOF)
	scStats(t, b, map[string]uint64{"ReadaheadsFailed": 0, "ChunksOverwritten": 0})

	newChunk(t, b, 1, 1, 0).AddPacket(32, 'a', 0).AddPacket(32, 'b', 0).AddPacket(64, 'c', scOn).Copy()
	scStats(t, b, map[string]uint64{"ChunksRewritten": 0, "ChunksRelocated": 1, "WriteWrapCount": 1})
	newChunk(t, b, 2, 2, 4).AddPacket(496, 'z', 0).Copy()
	scStats(t, b, map[string]uint64{"ReadaheadsFailed": 0, "ChunksOverwritten": 0})
	newChunk(t, b, 1, 1, 1).AddPacket(32, 'd', scFrom).AddPacket(32, 'e', 0).Copy()

	got := scPass(t, b, pk(32, 'b'), cat(pk(64, 'c'), pk(32, 'd')), pk(496, 'z'), pk(32, 'e'), scEOF)
	if got[0].P != 1 {
		t.Fatalf("b came from producer %d, want 1", got[0].P)
	}
	for _, p := range got {
		scDropped(t, p, 0)
	}
	scStats(t, b, map[string]uint64{"ReadaheadsSucceeded": 1})
}

func TestScrapedChunkRecommit_InPlaceWhenGatesFail(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(32, 'a', 0).AddPacket(32, 'b', 0).PadTo(512).Incomplete().Copy()
	scPass(t, b, pk(32, 'a'))
	newChunk(t, b, 1, 1, 0).AddPacket(32, 'a', 0).AddPacket(32, 'b', 0).AddPacket(32, 'c', 0).PadTo(512).Incomplete().Copy()
	scStats(t, b, map[string]uint64{"ChunksRewritten": 1, "ChunksRelocated": 0})
	newChunk(t, b, 1, 1, 0).AddPacket(32, 'a', 0).AddPacket(32, 'b', 0).AddPacket(32, 'c', 0).AddPacket(32, 'd', 0).PadTo(512).Copy()
	scStats(t, b, map[string]uint64{"ChunksRewritten": 2, "ChunksRelocated": 0})
	scPass(t, b, pk(32, 'b'), pk(32, 'c'), pk(32, 'd'), scEOF)
}

func TestScrapedChunkRecommit_InPlaceOnFullDiscardBuffer(t *testing.T) {
	b := scNew(t, 4096, Discard)
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(10, 'b', scOn).PadTo(1024).Incomplete().Copy()
	scPass(t, b, pk(20, 'a'))
	newChunk(t, b, 2, 1, 1).AddPacket(1008, 'x', 0).Copy()
	newChunk(t, b, 2, 1, 2).AddPacket(1008, 'y', 0).Copy()
	newChunk(t, b, 2, 1, 3).AddPacket(1008, 'z', 0).Copy()
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(10, 'b', 0).AddPacket(100, 'c', 0).PadTo(1024).Copy()
	scStats(t, b, map[string]uint64{"ChunksRewritten": 1, "ChunksRelocated": 0, "ChunksDiscarded": 0, "WriteWrapCount": 0})
	got := scPass(t, b, pk(10, 'b'), pk(100, 'c'), pk(1008, 'x'), pk(1008, 'y'), pk(1008, 'z'), scEOF)
	scDropped(t, got[0], 0)
}

func TestScrapedChunkRecommit_ContinuationAlreadyPresent(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(32, 'a', 0).AddPacket(32, 'b', 0).PadTo(512).Incomplete().Copy()
	scPass(t, b, pk(32, 'a'))
	newChunk(t, b, 1, 1, 1).AddPacket(32, 'd', scFrom).AddPacket(32, 'e', 0).Copy()
	newChunk(t, b, 1, 1, 0).AddPacket(32, 'a', 0).AddPacket(32, 'b', 0).AddPacket(64, 'c', scOn).Copy()
	scStats(t, b, map[string]uint64{"ChunksRewritten": 0, "ChunksRelocated": 1})
	got := scPass(t, b, pk(32, 'b'), cat(pk(64, 'c'), pk(32, 'd')), pk(32, 'e'), scEOF)
	for _, p := range got {
		scDropped(t, p, 0)
	}
	scStats(t, b, map[string]uint64{"ReadaheadsSucceeded": 1})
}

func TestOverride_ReCommitBeforeRead(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(100, 'a', 0).AddPacket(100, 'b', 0).PadTo(512).Incomplete().Copy()
	scStats(t, b, map[string]uint64{"ChunksRewritten": 0})
	newChunk(t, b, 1, 1, 0).AddPacket(100, 'a', 0).AddPacket(100, 'b', 0).AddPacket(100, 'c', 0).AddPacket(100, 'd', 0).PadTo(512).Copy()
	scStats(t, b, map[string]uint64{"ChunksRewritten": 1})
	scPass(t, b, pk(100, 'a'), pk(100, 'b'), pk(100, 'c'), pk(100, 'd'), scEOF)
}

func TestOverride_ReCommitAfterPartialRead(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).PadTo(512).Incomplete().Copy()
	scPass(t, b, pk(20, 'a'))
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).AddPacket(40, 'c', 0).AddPacket(50, 'd', 0).PadTo(512).Copy()
	scPass(t, b, pk(30, 'b'), pk(40, 'c'), pk(50, 'd'), scEOF)
}

func TestOverride_ReCommitAfterFullRead(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).AddPacket(5, '_', 0).PadTo(512).Incomplete().Copy()
	scPass(t, b, pk(20, 'a'), pk(30, 'b'))
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).AddPacket(40, 'c', 0).AddPacket(50, 'd', 0).PadTo(512).Copy()
	scPass(t, b, pk(40, 'c'), pk(50, 'd'), scEOF)
}

func TestOverride_ReCommitInvalid(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).PadTo(512).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(40, 'c', 0).AddPacket(50, 'd', 0).PadTo(512).Copy()
	scPass(t, b, pk(20, 'a'), pk(30, 'b'), pk(40, 'c'))
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'e', 0).AddPacket(60, 'f', 0).AddPacket(70, 'g', 0).PadTo(512).Copy()
	scStats(t, b, map[string]uint64{"ChunksDiscarded": 1})
	scPass(t, b, pk(50, 'd'), scEOF)
}

func TestOverride_ReCommitReordered(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).PadTo(512).Incomplete().Copy()
	scPass(t, b, pk(20, 'a'))
	newChunk(t, b, 1, 1, 1).AddPacket(50, 'd', 0).AddPacket(60, 'e', 0).PadTo(512).Copy()
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).AddPacket(40, 'c', 0).PadTo(512).Copy()
	scPass(t, b, pk(30, 'b'), pk(40, 'c'), pk(50, 'd'), pk(60, 'e'))
}

func TestOverride_ReCommitReorderedFragmenting(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).PadTo(512).Incomplete().Copy()
	scPass(t, b, pk(20, 'a'))
	newChunk(t, b, 1, 1, 1).AddPacket(50, 'd', scFrom).AddPacket(60, 'e', 0).PadTo(512).Copy()
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).AddPacket(40, 'c', scOn).PadTo(512).Copy()
	scPass(t, b, pk(30, 'b'), cat(pk(40, 'c'), pk(50, 'd')), pk(60, 'e'))
}

func TestOverride_ReCommitSameBeforeRead(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).PadTo(512).Copy()
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).PadTo(512).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(40, 'c', 0).AddPacket(50, 'd', 0).PadTo(512).Copy()
	scPass(t, b, pk(20, 'a'), pk(30, 'b'), pk(40, 'c'), pk(50, 'd'), scEOF)
	scStats(t, b, map[string]uint64{"ChunksWritten": 2, "ChunksRewritten": 0})
}

func TestOverride_ReCommitSameAfterRead(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).PadTo(512).Copy()
	scPass(t, b, pk(20, 'a'), pk(30, 'b'))
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).PadTo(512).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(40, 'c', 0).AddPacket(50, 'd', 0).PadTo(512).Copy()
	scPass(t, b, pk(40, 'c'), pk(50, 'd'), scEOF)
}

func TestOverride_ReCommitIncompleteAfterReadOutOfOrder(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).PadTo(512).Incomplete().Copy()
	scPass(t, b, pk(20, 'a'), scEOF)
	newChunk(t, b, 1, 1, 1).AddPacket(40, 'c', 0).AddPacket(50, 'd', 0).PadTo(512).Copy()
	scPass(t, b, scEOF)
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).PadTo(512).Copy()
	got := scPass(t, b, pk(30, 'b'), pk(40, 'c'), pk(50, 'd'), scEOF)
	for _, p := range got {
		scDropped(t, p, 0)
	}
}

func TestOverride_ReCommitIncompleteFragmenting(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', scOn).PadTo(512).Incomplete().Copy()
	scPass(t, b, pk(20, 'a'), scEOF)
	newChunk(t, b, 1, 1, 1).AddPacket(40, 'c', scFrom).AddPacket(50, 'd', 0).PadTo(512).Copy()
	scPass(t, b, scEOF)
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', scOn).PadTo(512).Copy()
	scPass(t, b, cat(pk(30, 'b'), pk(40, 'c')), pk(50, 'd'), scEOF)
}

func TestOverride_EndOfBuffer(t *testing.T) {
	b := scNew(t, 3072, RingBuffer)
	if b.Size() != 4096 {
		t.Fatalf("Size %d, want 4096 (3072 rounded up)", b.Size())
	}
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).PadTo(2048).Incomplete().Copy()
	scPass(t, b, pk(20, 'a'), scEOF)
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).PadTo(2048).Copy()
	scPass(t, b, pk(30, 'b'), scEOF)
}

func TestRecommit_IncompleteToCompleteWithFragments(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(50, 'a', 0).AddPacket(50, 'b', 0).PadTo(512).Incomplete().Copy()
	scPass(t, b, pk(50, 'a'), scEOF)
	newChunk(t, b, 1, 1, 0).AddPacket(50, 'a', 0).AddPacket(50, 'b', 0).AddPacket(30, 'c', scOn).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(40, 'd', scBoth).Copy()
	newChunk(t, b, 1, 1, 2).AddPacket(20, 'e', scFrom).Copy()
	scPass(t, b, pk(50, 'b'), cat(pk(30, 'c'), pk(40, 'd'), pk(20, 'e')))
}

// scScanFor drains one pass and reports which of the given payloads showed
// up, with their dropped values.
func scScanFor(b *TraceBuffer) map[string][]uint32 {
	seen := map[string][]uint32{}
	for _, p := range scDrain(b) {
		seen[p.Data] = append(seen[p.Data], p.Dropped)
	}
	return seen
}

func TestRescrapeAfterEviction_FullyRead(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(10, 'b', scOn).PadTo(512).Incomplete().Copy()
	scPass(t, b, pk(20, 'a'))
	for id := uint32(1); id <= 4; id++ {
		newChunk(t, b, 2, 1, id).AddPacket(1008, 'x', 0).Copy()
	}
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).AddPacket(10, 'c', scOn).PadTo(512).Incomplete().Copy()
	seen := scScanFor(b)
	if d := seen[pk(30, 'b')]; len(d) != 1 || d[0] != 0 {
		t.Fatalf("b seen with dropped %v, want exactly once with 0", d)
	}
	if _, ok := seen[pk(20, 'a')]; ok {
		t.Fatal("a reappeared")
	}
	if _, ok := seen[pk(10, 'c')]; ok {
		t.Fatal("c (last fragment of a scraped chunk) appeared")
	}
}

func TestRescrapeAfterEviction_CompleteCommit(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).AddPacket(10, 'c', scOn).PadTo(512).Incomplete().Copy()
	scPass(t, b, pk(20, 'a'), pk(30, 'b'))
	for id := uint32(1); id <= 4; id++ {
		newChunk(t, b, 2, 1, id).AddPacket(1008, 'x', 0).Copy()
	}
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).AddPacket(10, 'c', scOn).PadTo(512).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(10, 'd', scFrom).AddPacket(20, 'e', 0).Copy()
	seen := scScanFor(b)
	if len(seen[cat(pk(10, 'c'), pk(10, 'd'))]) != 1 || len(seen[pk(20, 'e')]) != 1 {
		t.Fatalf("want c+d and e once each, got %v", scKeys(seen))
	}
	if _, ok := seen[pk(20, 'a')]; ok {
		t.Fatal("a reappeared")
	}
	if _, ok := seen[pk(30, 'b')]; ok {
		t.Fatal("b reappeared")
	}
}

func TestRescrapeAfterEviction_PartiallyRead(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).AddPacket(40, 'c', 0).PadTo(512).Copy()
	scPass(t, b, pk(20, 'a'), pk(30, 'b'), pk(40, 'c'), scEOF)
	for id := uint32(1); id <= 4; id++ {
		newChunk(t, b, 2, 1, id).AddPacket(1008, 'x', 0).Copy()
	}
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).AddPacket(40, 'c', 0).AddPacket(50, 'd', 0).PadTo(512).Copy()
	scStats(t, b, map[string]uint64{"ChunksDiscarded": 1})
	seen := scScanFor(b)
	for _, s := range []string{pk(20, 'a'), pk(30, 'b'), pk(40, 'c'), pk(50, 'd')} {
		if _, ok := seen[s]; ok {
			t.Fatalf("rejected recommit yielded %s", scShow(s))
		}
	}
}

func TestScrapeRecommitPreservesIncomplete(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	scrape := func() *fakeChunk {
		return newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).AddPacket(10, 'c', scOn).PadTo(512)
	}
	scrape().Incomplete().Copy()
	scPass(t, b, pk(20, 'a'), pk(30, 'b'), scEOF)
	scrape().Incomplete().Copy()
	scPass(t, b, scEOF)
	scStats(t, b, map[string]uint64{"ChunksDiscarded": 0})
	scrape().Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(10, 'd', scFrom).AddPacket(20, 'e', 0).Copy()
	got := scPass(t, b, cat(pk(10, 'c'), pk(10, 'd')), pk(20, 'e'), scEOF)
	scDropped(t, got[0], 0)
	scDropped(t, got[1], 0)
}

func TestOverride_ReCommitIncompleteOnFullBuffer(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(10, 'b', scOn).PadTo(1024).Incomplete().Copy()
	scPass(t, b, pk(20, 'a'), scEOF)
	newChunk(t, b, 2, 1, 1).AddPacket(1008, 'x', 0).Copy()
	newChunk(t, b, 2, 1, 2).AddPacket(1008, 'y', 0).Copy()
	newChunk(t, b, 2, 1, 3).AddPacket(1008, 'z', 0).Copy()
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(10, 'b', 0).AddPacket(100, 'c', 0).PadTo(1024).Copy()
	scStats(t, b, map[string]uint64{"ChunksRelocated": 1, "WriteWrapCount": 1})
	got := scPass(t, b, pk(1008, 'x'), pk(1008, 'y'), pk(1008, 'z'), pk(10, 'b'), pk(100, 'c'), scEOF)
	scDropped(t, got[3], 0)
}

func TestScrapeWithLateRecommitAfterRead(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	chunk0 := func() *fakeChunk {
		return newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).AddPacket(30, 'b', 0).AddPacket(10, 'c', 0).PadTo(512)
	}
	chunk0().Incomplete().Copy()
	newChunk(t, b, 2, 1, 1).AddPacket(1008, 'd', 0).Copy()
	newChunk(t, b, 2, 1, 2).AddPacket(1008, 'e', 0).Copy()
	newChunk(t, b, 2, 1, 3).AddPacket(1008, 'f', 0).Copy()
	scPass(t, b, pk(20, 'a'), pk(30, 'b'), pk(1008, 'd'), pk(1008, 'e'), pk(1008, 'f'), scEOF)
	scStats(t, b, map[string]uint64{"ChunksOverwritten": 0})
	newChunk(t, b, 2, 1, 4).AddPacket(1008, 'g', 0).Copy()
	newChunk(t, b, 2, 1, 5).AddPacket(1008, 'h', 0).Copy()
	got := scPass(t, b, pk(1008, 'g'), pk(1008, 'h'), scEOF)
	scDropped(t, got[0], 0)
	scDropped(t, got[1], 0)
	chunk0().Copy()
	got = scPass(t, b, pk(10, 'c'), scEOF)
	scDropped(t, got[0], 0)
}

func scKeys(m map[string][]uint32) []string {
	var out []string
	for k := range m {
		out = append(out, scShow(k))
	}
	return out
}
