package buffer

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
)

// Byte-exact vectors of test-vectors.md §2, §4-6, §10 and §11.

func mustNew(t *testing.T, size int, p Policy) *TraceBuffer {
	t.Helper()
	b, err := New(size, p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	d, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func wantPackets(t *testing.T, got []readPacket, want ...readPacket) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d packets %+v, want %d %+v", len(got), got, len(want), want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("packet %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestVectorFakePacketFragment checks the §2 generator table.
func TestVectorFakePacketFragment(t *testing.T) {
	for _, c := range []struct {
		n       int
		c       byte
		hdr     string
		payload string
	}{
		{10, 'a', "09", "a00-a01-a"},
		{20, 'b', "13", "b00-b01-b02-b03-b04"},
		{30, 'c', "1d", "c00-c01-c02-c03-c04-c05-c06-c"},
		{9, 'b', "08", "b00-b01-"},
		{16, 'b', "0f", "b00-b01-b02-b03"},
		{4, 'a', "03", "a00"},
		{1, 'x', "00", ""},
	} {
		got := fakePacketFragment(c.n, c.c)
		want := append(unhex(t, c.hdr), c.payload...)
		if !bytes.Equal(got, want) {
			t.Errorf("fakePacketFragment(%d,%q) = % x, want % x", c.n, c.c, got, want)
		}
	}
	// Header forms for the three size classes.
	for _, c := range []struct {
		n   int
		hdr string
	}{{128, "7f"}, {129, "ff00"}, {130, "8001"}, {4096, "fe1f"}} {
		f := fakePacketFragment(c.n, 'z')
		h := unhex(t, c.hdr)
		if len(f) != c.n || !bytes.Equal(f[:len(h)], h) {
			t.Errorf("fakePacketFragment(%d): len %d header % x, want %d and % x", c.n, len(f), f[:len(h)], c.n, h)
		}
	}
}

// TestVectorFragmentedPacketWithPatch is §4: a packet split across two
// chunks whose nested length is patched out of band.
func TestVectorFragmentedPacketWithPatch(t *testing.T) {
	b := mustNew(t, 4096, RingBuffer)
	id := ClientIdentity{UID: 1000, PID: 1234}
	a := unhex(t, "0a 40 e8 07 a2 38 04 0a 02 68 69 88 80 80 00 a2 38 00 00 00 00 0a 0a")
	bb := unhex(t, "0a 41 42 43 44 45 46 47 48 49 4a 03 40 d0 0f")
	b.CopyChunkUntrusted(1, id, 1, 7, 2, 0x06, true, append(a, make([]byte, 100)...))
	b.CopyChunkUntrusted(1, id, 1, 8, 2, 0x01, true, bb)
	if st := b.Stats(); st.ChunksWritten != 2 || st.BytesWritten != 80 || b.UsedSize() != 80 {
		t.Fatalf("after copies: chunks_written %d bytes_written %d used %d; want 2, 80, 80",
			st.ChunksWritten, st.BytesWritten, b.UsedSize())
	}
	if b.recCap(0) != 23 || b.recOuter(0) != 48 || b.recCap(48) != 15 || b.recOuter(48) != 32 {
		t.Fatalf("records: cap %d outer %d, cap %d outer %d; want 23/48, 15/32",
			b.recCap(0), b.recOuter(0), b.recCap(48), b.recOuter(48))
	}
	p1 := string(unhex(t, "40 e8 07 a2 38 04 0a 02 68 69"))
	wantPackets(t, readPackets(b), readPacket{1, 1, 0, p1})
	if st := b.Stats(); st.ReadaheadsFailed != 1 {
		t.Fatalf("readaheads_failed %d, want 1", st.ReadaheadsFailed)
	}
	if !b.TryPatchChunkContents(1, 1, 7, []Patch{{Offset: 17, Data: [4]byte{0x8c, 0x80, 0x80, 0}}}, false) {
		t.Fatal("patch failed")
	}
	b.BeginRead()
	var p Packet
	if !b.ReadNextTracePacket(&p) {
		t.Fatal("P2 missing")
	}
	if len(p.Slices) != 2 || !bytes.Equal(p.Slices[0], unhex(t, "a2 38 8c 80 80 00 0a 0a")) ||
		string(p.Slices[1]) != "ABCDEFGHIJ" || p.Size() != 18 || p.Seq.Client != id {
		t.Fatalf("P2 = %q (client %+v)", p.Slices, p.Seq.Client)
	}
	if !b.ReadNextTracePacket(&p) || !bytes.Equal(p.AppendTo(nil), unhex(t, "40 d0 0f")) {
		t.Fatalf("P3 = %x", p.AppendTo(nil))
	}
	if b.ReadNextTracePacket(&p) {
		t.Fatal("extra packet")
	}
	st := b.Stats()
	if st.ReadaheadsSucceeded != 1 || st.ChunksRead != 2 || st.BytesRead != 80 || st.PatchesSucceeded != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestVectorFragmentsSimple is §5.
func TestVectorFragmentsSimple(t *testing.T) {
	b := mustNew(t, 4096, RingBuffer)
	c0 := newChunk(t, b, 1, 1, 0).AddPacket(10, 'a', flagFirstContinues).AddPacket(20, 'b', 0).
		AddPacket(30, 'c', 0).AddPacket(10, 'd', flagLastContinues)
	want0 := unhex(t, "09 61 30 30 2d 61 30 31 2d 61"+
		"13 62 30 30 2d 62 30 31 2d 62 30 32 2d 62 30 33 2d 62 30 34"+
		"1d 63 30 30 2d 63 30 31 2d 63 30 32 2d 63 30 33 2d 63 30 34 2d 63 30 35 2d 63 30 36 2d 63"+
		"09 64 30 30 2d 64 30 31 2d 64")
	if !bytes.Equal(c0.Bytes(), want0) || c0.flags != 0x03 || c0.nfrags != 4 {
		t.Fatalf("chunk 0 = % x flags %#x frags %d", c0.Bytes(), c0.flags, c0.nfrags)
	}
	if n := c0.Copy(); n != 86 {
		t.Fatalf("chunk 0 copy returned %d, want 86", n)
	}
	c1 := newChunk(t, b, 1, 1, 1).AddPacket(20, 'e', flagFirstContinues).AddPacket(30, 'f', 0)
	if c1.Copy() != 66 {
		t.Fatal("chunk 1 size")
	}
	if b.recOuter(0) != 96 || b.recOuter(96) != 80 {
		t.Fatalf("outer sizes %d, %d; want 96, 80", b.recOuter(0), b.recOuter(96))
	}
	wantPackets(t, readPackets(b),
		readPacket{1, 1, LossPresent | LossOrphanContinuation, "b00-b01-b02-b03-b04"},
		readPacket{1, 1, 0, "c00-c01-c02-c03-c04-c05-c06-c"},
		readPacket{1, 1, 0, "d00-d01-d" + "e00-e01-e02-e03-e04"},
		readPacket{1, 1, 0, "f00-f01-f02-f03-f04-f05-f06-f"})
}

// TestVectorPatching is §6: Patching_Simple and Patching_AtBoundariesOfChunk.
func TestVectorPatching(t *testing.T) {
	b := mustNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(100, 'a', 0).Copy()
	c := newChunk(t, b, 2, 1, 0).AddPacket(9, 'b', 0).ClearBytes(5, 4)
	if !bytes.Equal(c.Bytes(), unhex(t, "08 62 30 30 2d 00 00 00 00")) {
		t.Fatalf("chunk = % x", c.Bytes())
	}
	c.Copy()
	newChunk(t, b, 3, 1, 0).AddPacket(100, 'c', 0).Copy()
	if !b.TryPatchChunkContents(2, 1, 0, []Patch{{Offset: 5, Data: [4]byte{'Y', 'M', 'C', 'A'}}}, false) {
		t.Fatal("patch failed")
	}
	got := readPackets(b)
	if len(got) != 3 || got[1] != (readPacket{2, 1, 0, "b00-YMCA"}) {
		t.Fatalf("got %+v", got)
	}

	b = mustNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(100, 'a', flagLastContinues).Copy()
	c = newChunk(t, b, 1, 1, 1).AddPacket(16, 'b', flagFirstContinues|flagLastContinues).
		ClearBytes(1, 4).ClearBytes(12, 4)
	if !bytes.Equal(c.Bytes(), unhex(t, "0f 00 00 00 00 62 30 31 2d 62 30 32 00 00 00 00")) {
		t.Fatalf("chunk = % x", c.Bytes())
	}
	c.Copy()
	newChunk(t, b, 1, 1, 2).AddPacket(100, 'c', flagFirstContinues).Copy()
	if !b.TryPatchChunkContents(1, 1, 1, []Patch{{1, [4]byte{'P', 'E', 'R', 'F'}}, {12, [4]byte{'E', 'T', 'T', 'O'}}}, false) {
		t.Fatal("patch failed")
	}
	wantPackets(t, readPackets(b),
		readPacket{1, 1, 0, fakePayload(100, 'a') + "PERFb01-b02ETTO" + fakePayload(100, 'c')})
}

// TestVectorReadWritePadding is the §10 layout walk-through.
func TestVectorReadWritePadding(t *testing.T) {
	b := mustNew(t, 4096, RingBuffer)
	for i, k := range []int{128, 256, 512, 1024, 2048} {
		newChunk(t, b, 1, 1, uint32(i)).AddPacket(k-16, 'a'+byte(i), 0).Copy()
	}
	if b.wr != 3968 || b.usedSize != 3968 {
		t.Fatalf("wr %d used %d, want 3968", b.wr, b.usedSize)
	}
	newChunk(t, b, 1, 1, 5).AddPacket(512-16, 'f', 0).Copy()
	st := b.Stats()
	if st.WriteWrapCount != 1 || st.ChunksOverwritten != 3 || st.BytesOverwritten != 896 ||
		st.PaddingBytesWritten != 384 || b.wr != 512 {
		t.Fatalf("after wrap: %+v wr %d", st, b.wr)
	}
	if b.recPriWri(512) != 0 || b.recOuter(512) != 384 {
		t.Fatalf("no 384-byte padding record at 512")
	}
	wantPackets(t, readPackets(b),
		readPacket{1, 1, LossPresent | LossOverwrite, fakePayload(1024-16, 'd')},
		readPacket{1, 1, 0, fakePayload(2048-16, 'e')},
		readPacket{1, 1, 0, fakePayload(512-16, 'f')})
	st = b.Stats()
	if st.BytesRead != 3584 || st.ChunksRead != 3 || st.BytesWritten != 4480 || st.ChunksWritten != 6 ||
		st.PaddingBytesCleared != 0 {
		t.Fatalf("after read: %+v", st)
	}
	newChunk(t, b, 1, 1, 6).AddPacket(128-16, 'g', 0).Copy()
	st = b.Stats()
	if st.PaddingBytesCleared != 384 || b.recPriWri(640) != 0 || b.recOuter(640) != 256 || b.wr != 640 {
		t.Fatalf("after g: %+v", st)
	}
}

// TestVectorLossBitmasks is §11.
func TestVectorLossBitmasks(t *testing.T) {
	t.Run("ReadGap", func(t *testing.T) {
		b := mustNew(t, 4096, RingBuffer)
		newChunk(t, b, 1, 1, 0).AddPacket(32, 'a', 0).Copy()
		wantPackets(t, readPackets(b), readPacket{1, 1, 0, fakePayload(32, 'a')})
		newChunk(t, b, 1, 1, 2).AddPacket(32, 'b', 0).Copy()
		wantPackets(t, readPackets(b), readPacket{1, 1, 3, fakePayload(32, 'b')})
	})
	t.Run("OverwriteVsChunkCount", func(t *testing.T) {
		b := mustNew(t, 4096, RingBuffer)
		for i := 0; i < 16; i++ {
			newChunk(t, b, 1, 1, uint32(i)).AddPacket(400, 'x', 0).Copy()
		}
		if b.Stats().ChunksOverwritten < 2 {
			t.Fatalf("chunks_overwritten %d", b.Stats().ChunksOverwritten)
		}
		got := readPackets(b)
		if len(got) == 0 || got[0].Dropped != 65 {
			t.Fatalf("survivors %+v", got)
		}
		for _, p := range got[1:] {
			if p.Dropped != 0 {
				t.Fatalf("later survivor dropped %d", p.Dropped)
			}
		}
	})
	t.Run("OrphanContinuation", func(t *testing.T) {
		b := mustNew(t, 4096, RingBuffer)
		newChunk(t, b, 1, 1, 0).AddPacket(32, 'a', flagFirstContinues).Copy()
		newChunk(t, b, 1, 1, 1).AddPacket(32, 'b', 0).Copy()
		wantPackets(t, readPackets(b), readPacket{1, 1, 9, fakePayload(32, 'b')})
	})
	t.Run("ReassemblyBrokenChain", func(t *testing.T) {
		b := mustNew(t, 4096, RingBuffer)
		newChunk(t, b, 1, 1, 0).AddPacket(32, 'a', flagLastContinues).Copy()
		newChunk(t, b, 1, 1, 1).AddPacket(32, 'b', 0).Copy()
		wantPackets(t, readPackets(b), readPacket{1, 1, 33, fakePayload(32, 'b')})
	})
	t.Run("ReassemblyGap", func(t *testing.T) {
		b := mustNew(t, 4096, RingBuffer)
		newChunk(t, b, 1, 1, 0).AddPacket(32, 'a', flagLastContinues).Copy()
		newChunk(t, b, 1, 1, 2).AddPacket(32, 'b', flagFirstContinues).Copy()
		newChunk(t, b, 1, 1, 3).AddPacket(32, 'c', 0).Copy()
		wantPackets(t, readPackets(b), readPacket{1, 1, 27, fakePayload(32, 'c')})
	})
	t.Run("PendingPatchesOverwrite", func(t *testing.T) {
		b := mustNew(t, 4096, RingBuffer)
		newChunk(t, b, 1, 1, 0).AddPacket(1024, 'a', flagLastContinues|flagNeedsPatching).Copy()
		newChunk(t, b, 1, 1, 1).AddPacket(1024, 'b', flagFirstContinues).Copy()
		wantPackets(t, readPackets(b))
		newChunk(t, b, 1, 1, 2).AddPacket(2000, 'c', 0).Copy()
		newChunk(t, b, 1, 1, 3).AddPacket(2000, 'd', 0).Copy()
		wantPackets(t, readPackets(b),
			readPacket{1, 1, 73, fakePayload(2000, 'c')},
			readPacket{1, 1, 0, fakePayload(2000, 'd')})
	})
}
