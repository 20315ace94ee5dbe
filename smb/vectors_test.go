package smb

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// test-vectors.md §1.
func TestVectorsRedundantVarint(t *testing.T) {
	for _, c := range []struct {
		v    uint32
		want string
	}{{0, "80808000"}, {5, "85808000"}, {12, "8c808000"}, {127, "ff808000"}, {128, "80818000"},
		{300, "ac828000"}, {DropPacketSize, "ffffff7f"}} {
		var b [4]byte
		PutRedundantVarint(b[:], c.v)
		if hex.EncodeToString(b[:]) != c.want {
			t.Errorf("%d: got %x want %s", c.v, b, c.want)
		}
		v, n := consumeVarintTest(b[:])
		if n != 4 || v != uint64(c.v) {
			t.Errorf("%d: decodes to %d (%d bytes)", c.v, v, n)
		}
	}
	// Tag bytes of §1.
	for _, c := range []struct {
		field, wt uint32
		want      string
	}{{3, 0, "18"}, {8, 0, "40"}, {10, 0, "50"}, {11, 2, "5a"}, {42, 0, "d002"}, {58, 0, "d003"},
		{60, 2, "e203"}, {79, 0, "f804"}, {87, 0, "b805"}, {124, 2, "e207"}, {125, 2, "ea07"}, {900, 2, "a238"}} {
		var buf []byte
		v := tag(c.field, c.wt)
		for v >= 0x80 {
			buf = append(buf, byte(v)|0x80)
			v >>= 7
		}
		buf = append(buf, byte(v))
		if hex.EncodeToString(buf) != c.want {
			t.Errorf("tag %d/%d: got %x want %s", c.field, c.wt, buf, c.want)
		}
	}
}

// test-vectors.md §3.
func TestVectorsPageBitmaps(t *testing.T) {
	div4 := uint32(LayoutDiv4) << LayoutShift
	div4 = WithState(div4, 0, ChunkComplete)
	div4 = WithState(div4, 1, ChunkBeingWritten)
	div4 = WithState(div4, 3, ChunkBeingRead)
	all14 := uint32(LayoutDiv14) << LayoutShift
	for i := range uint32(14) {
		all14 = WithState(all14, i, ChunkComplete)
	}
	for _, c := range []struct {
		name string
		bm   uint32
		want uint32
	}{
		{"Div1 free", uint32(LayoutDiv1) << LayoutShift, 0x10000000},
		{"Div1 BeingWritten", WithState(uint32(LayoutDiv1)<<LayoutShift, 0, ChunkBeingWritten), 0x10000001},
		{"Div1 Complete", WithState(uint32(LayoutDiv1)<<LayoutShift, 0, ChunkComplete), 0x10000003},
		{"Div7 partitioned", uint32(LayoutDiv7) << LayoutShift, 0x40000000},
		{"Div14 all complete", all14, 0x5FFFFFFF},
		{"Div4 mixed", div4, 0x30000087},
	} {
		if c.bm != c.want {
			t.Errorf("%s: %#x want %#x", c.name, c.bm, c.want)
		}
	}
	if !IsPageComplete(all14) || IsPageComplete(div4) || IsPageComplete(0) {
		t.Error("IsPageComplete wrong")
	}
	if StateOf(div4, 0) != ChunkComplete || StateOf(div4, 1) != ChunkBeingWritten || StateOf(div4, 2) != ChunkFree || StateOf(div4, 3) != ChunkBeingRead {
		t.Error("StateOf wrong")
	}
	for l, want := range map[PageLayout]uint32{LayoutDiv1: 0x1, LayoutDiv2: 0x3, LayoutDiv4: 0xf, LayoutDiv7: 0x7f, LayoutDiv14: 0x3fff} {
		if got := FreeChunksMask(uint32(l) << LayoutShift); got != want {
			t.Errorf("layout %d free mask %#x want %#x", l, got, want)
		}
	}
	sizes := map[int][5]int{4096: {4088, 2044, 1020, 584, 292}, 8192: {8184, 4092, 2044, 1168, 584},
		16384: {16376, 8188, 4092, 2336, 1168}, 32768: {32760, 16380, 8188, 4680, 2340}, 65536: {65528, 32764, 16380, 9360, 4680}}
	for ps, want := range sizes {
		for i, l := range []PageLayout{LayoutDiv1, LayoutDiv2, LayoutDiv4, LayoutDiv7, LayoutDiv14} {
			if got := l.ChunkSize(ps); got != want[i] {
				t.Errorf("page %d layout %d: chunk size %d want %d", ps, l, got, want[i])
			}
		}
	}
	if LayoutPageNotPartitionedChunks := PageLayout(6).NumChunks() + PageLayout(7).NumChunks() + LayoutNotPartitioned.NumChunks(); LayoutPageNotPartitionedChunks != 0 {
		t.Error("reserved layouts must have no chunks")
	}
	s, _ := NewHeapSMB(4096, 4096)
	if off := s.chunkOffset(0, LayoutDiv4, 2); off != 8+1020*2 {
		t.Errorf("Div4 chunk 2 at %d", off)
	}
	var b [8]byte
	ChunkHeader{ChunkID: 0x01020304, WriterID: 7, Count: 3, Flags: 3}.Encode(b[:])
	if hex.EncodeToString(b[:]) != "0403020107000300"[:12]+"030c" {
		t.Errorf("chunk header % x", b)
	}
	if h := DecodeChunkHeader(b[:]); h != (ChunkHeader{ChunkID: 0x01020304, WriterID: 7, Count: 3, Flags: 3}) {
		t.Errorf("decoded %+v", h)
	}
}

// test-vectors.md §4: two chunks of writer 1, a patch, and the
// CommitDataRequest that carries them; the reader and reassembler must
// produce P1, P2 (patched) and P3.
func TestVectorsEndToEndPatch(t *testing.T) {
	wantCommit := unhex(t, "0a 06 08 00 10 00 18 01 12 10 08 01 10 01 18 07 22 08 08 11 12 04 8c 80 80 00 18 05")
	cd := CommitData{
		ChunksToMove:   []ChunkToMove{{Page: 0, Chunk: 0, TargetBuffer: 1}},
		ChunksToPatch:  []ChunkToPatch{{TargetBuffer: 1, WriterID: 1, ChunkID: 7, Patches: []Patch{{Offset: 17, Data: [4]byte{0x8c, 0x80, 0x80, 0}}}}},
		FlushRequestID: 5,
	}
	if got := cd.AppendMarshal(nil); !bytes.Equal(got, wantCommit) {
		t.Fatalf("marshal\n got % x\nwant % x", got, wantCommit)
	}
	var dec CommitData
	if err := dec.Unmarshal(wantCommit); err != nil {
		t.Fatal(err)
	}
	if got := dec.AppendMarshal(nil); !bytes.Equal(got, wantCommit) {
		t.Fatalf("round trip % x", got)
	}

	s, _ := NewHeapSMB(8192, 4096)
	mem := s.Bytes()
	// Page 0: chunk A; page 1: chunk B; both Complete, layout Div1.
	store32(mem, 0, 0x10000003)
	store32(mem, 4096, 0x10000003)
	copy(mem[8:], unhex(t, "07 00 00 00 01 00 02 18"))
	copy(mem[16:], unhex(t, "0a 40 e8 07 a2 38 04 0a 02 68 69 88 80 80 00 a2 38 00 00 00 00 0a 0a"))
	copy(mem[4096+8:], unhex(t, "08 00 00 00 01 00 02 04"))
	copy(mem[4096+16:], unhex(t, "0a 41 42 43 44 45 46 47 48 49 4a 03 40 d0 0f"))

	r := NewReader(s)
	ra := newReassembler()
	var views []ChunkView
	onChunk := func(v *ChunkView) { views = append(views, *v); ra.addChunk(v) }
	r.ReadCommit(&dec, onChunk, ra.applyPatch)
	r.ReadCommit(&CommitData{ChunksToMove: []ChunkToMove{{Page: 1, Chunk: 0, TargetBuffer: 1}}}, onChunk, nil)
	if len(views) != 2 || views[0].ChunkID != 7 || views[0].Fragments != 2 || views[0].Flags != 6 || len(views[0].Payload) != 23 ||
		views[1].ChunkID != 8 || views[1].Flags != 1 || len(views[1].Payload) != 15 || !views[0].Complete {
		t.Fatalf("views %+v", views)
	}
	got, err := ra.packets(1)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"40e807a23804 0a026869", "a2388c808000 0a0a 4142434445464748494a", "40d00f"}
	if len(got.packets) != 3 {
		t.Fatalf("%d packets: %x", len(got.packets), got.packets)
	}
	for i, w := range want {
		if !bytes.Equal(got.packets[i], unhex(t, w)) {
			t.Errorf("packet %d: %x want %s", i, got.packets[i], w)
		}
	}
	if s.PageBitmap(0) != 0 || s.PageBitmap(1) != 0 {
		t.Error("chunks not freed")
	}
	if h, _ := s.ReadChunkHeader(0, 0); h != (ChunkHeader{}) {
		t.Errorf("header not zeroed: %+v", h)
	}
}

func TestEnsureValidShmSizes(t *testing.T) {
	for _, c := range []struct{ size, page, wantSize, wantPage uint32 }{
		{0, 0, DefaultShmSize, DefaultPageSize},
		{1 << 20, 16384, 1 << 20, 16384},
		{1 << 20, 65536, 1 << 20, 32768},       // page clamped
		{64 << 20, 4096, 32 << 20, 4096},       // size clamped
		{1 << 20, 12288, DefaultShmSize, 4096}, // 3 × 4 KiB is not a power of two
		{1 << 20, 1000, DefaultShmSize, 4096},  // not a multiple of 4 KiB
		{8192, 16384, DefaultShmSize, 4096},    // size < page
		{100000, 4096, DefaultShmSize, 4096},   // size not a multiple
		{0, 8192, DefaultShmSize, 8192},        // default size, explicit page
	} {
		s, p := EnsureValidShmSizes(c.size, c.page)
		if s != c.wantSize || p != c.wantPage {
			t.Errorf("EnsureValidShmSizes(%d, %d) = %d, %d; want %d, %d", c.size, c.page, s, p, c.wantSize, c.wantPage)
		}
	}
	if s, p := ChooseShmSizes(0, 8, 1<<20, 8192); s != DefaultShmSize || p != DefaultPageSize {
		t.Errorf("config page 8 bytes must invalidate both: %d %d", s, p)
	}
	if s, p := ChooseShmSizes(0, 0, 1<<20, 8192); s != 1<<20 || p != 8192 {
		t.Errorf("hints: %d %d", s, p)
	}
	if s, p := ChooseShmSizes(512<<10, 0, 1<<20, 16384); s != 512<<10 || p != 16384 {
		t.Errorf("config size wins: %d %d", s, p)
	}
}
