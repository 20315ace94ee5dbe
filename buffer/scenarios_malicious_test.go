package buffer

import (
	"bytes"
	"testing"
)

// Catalogue §14 "Malicious input" (40-52).

func TestMalicious_ZeroSizedChunk(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(32, 'a', 0).Copy()
	b.CopyChunkUntrusted(1, ClientIdentity{}, 1, 1, 1, 0, true, []byte{0})
	newChunk(t, b, 1, 1, 2).AddPacket(32, 'b', 0).Copy()
	scPass(t, b, pk(32, 'a'), pk(32, 'b'), scEOF)
}

func TestMalicious_ChunkTooBig(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(4096, 'a', 0).AddPacket(2048, 'b', 0).Copy()
	scPass(t, b, scEOF)
	scStats(t, b, map[string]uint64{"AbiViolations": 1, "ChunksWritten": 0})
	if b.HasData() {
		t.Fatal("rejected chunk left data in the buffer")
	}
}

func TestMalicious_DeclareMorePacketsBeyondBoundaries(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(64, 'a', 0).SetFragments(3).Copy()
	newChunk(t, b, 1, 2, 0).SetFragments(1).Copy()
	newChunk(t, b, 1, 3, 0).AddPacket(32, 'b', 0).Copy()
	scPass(t, b, pk(64, 'a'), pk(32, 'b'), scEOF, scEOF)
	scStats(t, b, map[string]uint64{"AbiViolations": 2})
}

func TestMalicious_ZeroVarintHeader(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(4, 'a', 0).ClearBytes(0, 1).AddPacket(4, 'b', 0).Copy()
	newChunk(t, b, 2, 1, 0).AddPacket(4, 'c', 0).Copy()
	got := scPass(t, b, pk(4, 'c'), scEOF)
	if got[0].P != 2 {
		t.Fatalf("c read from producer %d", got[0].P)
	}
}

func TestMalicious_OverflowingVarintHeader(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(4079, 'a', 0).AddPacketBytes([]byte{0x82}, 0).Copy()
	scPass(t, b, pk(4079, 'a'), scEOF, scEOF)
}

func TestMalicious_VarintHeaderTooBig(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(32, 'a', 0).Copy()
	newChunk(t, b, 2, 1, 0).AddPacketBytes(append([]byte{0x16}, "123456789abcdef"...), 0).Copy()
	newChunk(t, b, 3, 1, 0).AddPacketBytes([]byte{0xff, 0xff, 0xff, 0x7f}, 0).Copy()
	jumbo := bytes.Repeat([]byte{0xff}, 112)
	jumbo[len(jumbo)-1] = 0x7f
	newChunk(t, b, 4, 1, 1).AddPacketBytes(jumbo, 0).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(32, 'b', 0).Copy()
	scPass(t, b, pk(32, 'a'), pk(32, 'b'), scEOF)
}

func TestMalicious_JumboVarint(t *testing.T) {
	b := scNew(t, 64*1024, RingBuffer)
	jumbo := bytes.Repeat([]byte{0xff}, 64*1024-32)
	jumbo[len(jumbo)-1] = 0x7f
	for i := 0; i < 3; i++ {
		b.CopyChunkUntrusted(1, ClientIdentity{}, 1, 1, 1, 0, true, jumbo)
	}
	scPass(t, b, scEOF)
}

func TestMalicious_ZeroVarintHeaderInSequence(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(4, 'a', scOn).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(4, 'b', scBoth).ClearBytes(0, 1).Copy()
	newChunk(t, b, 1, 1, 2).AddPacket(4, 'c', scFrom).AddPacket(4, 'd', 0).Copy()
	newChunk(t, b, 1, 1, 3).AddPacket(4, 'e', 0).Copy()
	newChunk(t, b, 2, 1, 3).AddPacket(5, 'f', 0).Copy()
	scPass(t, b, cat(pk(4, 'a'), pk(4, 'c')), pk(4, 'd'), pk(4, 'e'), pk(5, 'f'), scEOF)
}

func TestMalicious_ZeroVarintHeaderAtEndOfChunk(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(4, 'a', 0).AddPacket(4, 'b', scOn).ClearBytes(4, 4).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(4, 'c', scFrom).AddPacket(4, 'd', 0).Copy()
	newChunk(t, b, 1, 1, 2).AddPacket(4, 'e', 0).Copy()
	newChunk(t, b, 2, 1, 3).AddPacket(4, 'f', 0).Copy()
	scPass(t, b, pk(4, 'a'), pk(4, 'c'), pk(4, 'd'), pk(4, 'e'), pk(4, 'f'), scEOF)
}

func TestMalicious_PatchOutOfBounds(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(2048, 'a', 0).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(16, 'b', 0).Copy()
	neg := func(n uint32) uint32 { return -n }
	offs := []uint32{13, 16, neg(4), neg(8), neg(12), neg(16), neg(20), neg(32), neg(1024)}
	for _, off := range offs {
		if b.TryPatchChunkContents(1, 1, 1, []Patch{scPatchOf(off, "0day")}, false) {
			t.Fatalf("patch at offset %#x succeeded", off)
		}
	}
	scStats(t, b, map[string]uint64{"PatchesFailed": uint64(len(offs)), "PatchesSucceeded": 0})
	// Nothing was written outside the chunk: both packets read back intact.
	scPass(t, b, pk(2048, 'a'), pk(16, 'b'), scEOF)
}

func TestMalicious_OverrideWithShorterChunkSize(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(2048, 'a', 0).Copy()
	newChunk(t, b, 1, 1, 0).AddPacket(1024, 'b', 0).Copy()
	scPass(t, b, pk(2048, 'a'), scEOF)
	scStats(t, b, map[string]uint64{"AbiViolations": 1, "ChunksRewritten": 0})
}

func TestMalicious_OverrideWithShorterChunkSizeAfterRead(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(30, 'a', 0).AddPacket(40, 'b', 0).Copy()
	scPass(t, b, pk(30, 'a'), pk(40, 'b'))
	newChunk(t, b, 1, 1, 0).AddPacket(10, 'a', 0).AddPacket(10, 'b', 0).AddPacket(10, 'c', 0).Copy()
	scPass(t, b, scEOF)
	newChunk(t, b, 1, 1, 1).AddPacket(10, 'd', 0).AddPacket(10, 'e', 0).Copy()
	scPass(t, b, pk(10, 'd'), pk(10, 'e'), scEOF)
}

func TestMalicious_OverrideWithDifferentOffsetAfterRead(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(30, 'a', 0).AddPacket(40, 'b', 0).PadTo(512).Copy()
	scPass(t, b, pk(30, 'a'), pk(40, 'b'))
	newChunk(t, b, 1, 1, 0).AddPacket(10, 'a', 0).AddPacket(10, 'b', 0).AddPacket(10, 'c', 0).PadTo(512).Copy()
	scPass(t, b, scEOF)
	newChunk(t, b, 1, 1, 1).AddPacket(10, 'd', 0).AddPacket(10, 'e', 0).PadTo(512).Copy()
	scPass(t, b, pk(10, 'd'), pk(10, 'e'), scEOF)
}
