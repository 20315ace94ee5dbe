package buffer

import (
	"math/rand/v2"
	"testing"
)

// Catalogue §14 "Read/write basics" (1-9) plus the two V1-only padding
// scenarios whose readback applies to V2 as well.

func TestReadWrite_EmptyBuffer(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	scPass(t, b, scEOF)
	if b.HasData() || b.UsedSize() != 0 {
		t.Fatalf("empty buffer: HasData %v UsedSize %d", b.HasData(), b.UsedSize())
	}
}

func TestReadWrite_Simple(t *testing.T) {
	b := scNew(t, 64*1024, RingBuffer)
	for id := uint32(0); id < 1000; id++ {
		seed := byte(id)
		newChunk(t, b, 1, 1, id).AddPacket(42, seed, 0).Copy()
		scPass(t, b, pk(42, seed), scEOF)
		st := b.Stats()
		if st.ChunksWritten != uint64(id)+1 || st.ChunksRead != st.ChunksWritten {
			t.Fatalf("round %d: chunks written %d read %d", id, st.ChunksWritten, st.ChunksRead)
		}
		if st.BytesWritten == 0 || st.BytesWritten != st.BytesRead {
			t.Fatalf("round %d: bytes written %d read %d", id, st.BytesWritten, st.BytesRead)
		}
		if st.PaddingBytesWritten != 0 || st.PaddingBytesCleared != 0 {
			t.Fatalf("round %d: padding written %d cleared %d", id, st.PaddingBytesWritten, st.PaddingBytesCleared)
		}
	}
}

func TestReadWrite_OneChunkPerWriter(t *testing.T) {
	for n := 1; n <= 10; n++ {
		b := scNew(t, 4096, RingBuffer)
		var want []string
		for i := 1; i <= n; i++ {
			scCopyLen(t, newChunk(t, b, uint16(i), uint16(i), uint32(i)).AddPacket(16, byte(i), 0), 32)
			want = append(want, pk(16, byte(i)))
		}
		got := scPass(t, b, append(want, scEOF)...)
		for i, p := range got {
			if p.P != uint16(i+1) || p.W != uint16(i+1) {
				t.Fatalf("writers=%d packet %d from (%d,%d), want (%d,%d)", n, i, p.P, p.W, i+1, i+1)
			}
		}
	}
}

func TestReadWrite_FillTillEnd(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	for r := 0; r < 3; r++ {
		id := uint32(4 * r)
		scCopyLen(t, newChunk(t, b, 1, 1, id).AddPacket(512-16, 'a', 0), 512)
		scCopyLen(t, newChunk(t, b, 1, 1, id+1).AddPacket(512-16, 'b', 0), 512)
		scCopyLen(t, newChunk(t, b, 1, 1, id+2).AddPacket(1024-16, 'c', 0), 1024)
		scCopyLen(t, newChunk(t, b, 1, 1, id+3).AddPacket(2048-16, 'd', 0), 2048)
		// The cursor sits exactly at the end: the wrap is only counted
		// when the next round's first write needs it, and nothing unread
		// is ever overwritten.
		scStats(t, b, map[string]uint64{"WriteWrapCount": uint64(r), "ChunksOverwritten": 0})
		if b.UsedSize() != 4096 {
			t.Fatalf("round %d: UsedSize %d, want 4096", r, b.UsedSize())
		}
		scPass(t, b, pk(512-16, 'a'), pk(512-16, 'b'), pk(1024-16, 'c'), pk(2048-16, 'd'), scEOF)
	}
}

func TestReadWrite_Padding(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	sizes := []int{128, 256, 512, 1024, 2048}
	for i, sz := range sizes {
		scCopyLen(t, newChunk(t, b, 1, 1, uint32(i)).AddPacket(sz-16, 'a'+byte(i), 0), sz)
	}
	if b.UsedSize() != 3968 {
		t.Fatalf("UsedSize %d, want 3968", b.UsedSize())
	}
	scCopyLen(t, newChunk(t, b, 1, 1, 5).AddPacket(512-16, 'f', 0), 512)
	scPass(t, b, pk(1024-16, 'd'), pk(2048-16, 'e'), pk(512-16, 'f'), scEOF)
	scStats(t, b, map[string]uint64{
		"ChunksWritten": 6, "ChunksOverwritten": 3, "ChunksRead": 3,
		"BytesWritten": 4480, "BytesOverwritten": 896, "BytesRead": 3584,
		"PaddingBytesWritten": 384, "PaddingBytesCleared": 0, "WriteWrapCount": 1,
	})
	scCopyLen(t, newChunk(t, b, 1, 1, 6).AddPacket(128-16, 'g', 0), 128)
	scStats(t, b, map[string]uint64{"PaddingBytesCleared": 384})
}

func TestReadWrite_MinimalPadding(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	scCopyLen(t, newChunk(t, b, 1, 1, 0).AddPacket(2048-16, 'a', 0), 2048)
	scCopyLen(t, newChunk(t, b, 1, 1, 1).AddPacket(1024-16, 'b', 0), 1024)
	scCopyLen(t, newChunk(t, b, 1, 1, 2).AddPacket(1008-16, 'c', 0), 1008)
	scCopyLen(t, newChunk(t, b, 1, 1, 3), 16)
	if b.UsedSize() != 4096 {
		t.Fatalf("UsedSize %d, want 4096", b.UsedSize())
	}
	scCopyLen(t, newChunk(t, b, 1, 1, 4).AddPacket(2032-16, 'd', 0), 2032)
	scCopyLen(t, newChunk(t, b, 1, 1, 5).AddPacket(1040-16, 'e', 0), 1040)
	scCopyLen(t, newChunk(t, b, 1, 1, 6), 16)
	scCopyLen(t, newChunk(t, b, 1, 1, 7).AddPacket(1008-16, 'f', 0), 1008)
	scPass(t, b, pk(2032-16, 'd'), pk(1040-16, 'e'), pk(1008-16, 'f'), scEOF, scEOF, scEOF)
}

func TestReadWrite_RandomChunksNoWrapping(t *testing.T) {
	for seed := uint64(1); seed <= 32; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x7b))
		size := 4096 * (1 + rng.IntN(32))
		b := scNew(t, size, RingBuffer)
		type exp struct {
			p, w uint16
			data string
		}
		var want []exp
		used := 0
		for id := uint32(0); ; id++ {
			chunkSize := 18 + rng.IntN(4096-18+1)
			aligned := (chunkSize + 15) &^ 15
			if aligned >= size-used {
				break
			}
			p := uint16(1 + rng.IntN(65535))
			w := uint16(1 + rng.IntN(32767))
			scCopyLen(t, newChunk(t, b, p, w, id).AddPacket(chunkSize-16, byte(chunkSize), 0), chunkSize)
			used += aligned
			want = append(want, exp{p, w, pk(chunkSize-16, byte(chunkSize))})
		}
		b.BeginRead()
		for i, e := range want {
			got, ok := readOne(b)
			if !ok || got.Data != e.data || got.P != e.p || got.W != e.w {
				t.Fatalf("seed %d packet %d: got ok=%v (%d,%d) %s, want (%d,%d) %s",
					seed, i, ok, got.P, got.W, scShow(got.Data), e.p, e.w, scShow(e.data))
			}
		}
		scNext(t, b, scEOF)
	}
}

func TestReadWrite_WrappingCases(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	scCopyLen(t, newChunk(t, b, 1, 1, 0).AddPacket(4080-16, 'a', 0), 4080)
	scPass(t, b, pk(4080-16, 'a'), scEOF)
	scCopyLen(t, newChunk(t, b, 1, 1, 1), 16)
	scCopyLen(t, newChunk(t, b, 1, 1, 2).AddPacket(2048-16, 'b', 0), 2048)
	scCopyLen(t, newChunk(t, b, 1, 1, 3).AddPacket(2048-16, 'c', 0), 2048)
	scPass(t, b, pk(2048-16, 'b'), pk(2048-16, 'c'), scEOF)
}

func TestReadWrite_EmptyPacket(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(42, 1, 0).AddPacket(1, 2, 0).AddPacket(42, 3, 0).Copy()
	scPass(t, b, pk(42, 1), pk(42, 3), scEOF)
	scStats(t, b, map[string]uint64{"AbiViolations": 0})
}

// V1-only scenario; the catalogue says the same readback applies to V2.
func TestReadWrite_PaddingAtEndUpdatesIndex(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	scCopyLen(t, newChunk(t, b, 1, 1, 0).AddPacket(2048-16, 'a', 0), 2048)
	scCopyLen(t, newChunk(t, b, 1, 1, 1).AddPacket(2048-16, 'b', 0), 2048)
	scCopyLen(t, newChunk(t, b, 1, 1, 2).AddPacket(2048-16, 'c', 0), 2048)
	scCopyLen(t, newChunk(t, b, 1, 1, 3).AddPacket(3072-16, 'd', 0), 3072)
	scPass(t, b, pk(3072-16, 'd'), scEOF)
}

// V1-only scenario; the catalogue says the same readback applies to V2.
func TestReadWrite_PaddingAtEndUpdatesIndexMisaligned(t *testing.T) {
	b := scNew(t, 4096, RingBuffer)
	for i := 0; i < 8; i++ {
		scCopyLen(t, newChunk(t, b, 1, 1, uint32(i)).AddPacket(512-16, 'a'+byte(i), 0), 512)
	}
	scCopyLen(t, newChunk(t, b, 1, 1, 8).AddPacket(2080-16, 'i', 0), 2080)
	scCopyLen(t, newChunk(t, b, 1, 1, 9).AddPacket(3104-16, 'j', 0), 3104)
	scPass(t, b, pk(3104-16, 'j'), scEOF)
}
