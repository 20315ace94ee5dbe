package smb

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/internal/testsupport"
)

// goldenDir returns ../shared/golden/perfetto-smb/<sub> (a failure in CI
// when it is missing, a skip locally).
func goldenDir(t testing.TB, sub string) string {
	t.Helper()
	return testsupport.GoldenDir(t, "perfetto-smb", sub)
}

func readGolden(t testing.TB, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// loadSMB copies raw SMB bytes into a fresh heap SMB.
func loadSMB(t testing.TB, raw []byte, pageSize int) *SMB {
	t.Helper()
	s, err := NewHeapSMB(len(raw), pageSize)
	if err != nil {
		t.Fatal(err)
	}
	copy(s.Bytes(), raw)
	return s
}

// splitRecords splits commits.bin into its length-prefixed records.
func splitRecords(t testing.TB, b []byte) [][]byte {
	t.Helper()
	var recs [][]byte
	for len(b) > 0 {
		if len(b) < 4 {
			t.Fatalf("commits: %d trailing bytes", len(b))
		}
		n := binary.LittleEndian.Uint32(b)
		if uint64(n) > uint64(len(b)-4) {
			t.Fatalf("commits: record of %d bytes overruns the file", n)
		}
		recs = append(recs, b[4:4+n])
		b = b[4+n:]
	}
	return recs
}

// readPacketsTxt parses packets.txt into per-writer packet lists.
func readPacketsTxt(t testing.TB, dir string) map[uint16][][]byte {
	t.Helper()
	out := map[uint16][][]byte{}
	sc := bufio.NewScanner(bytes.NewReader(readGolden(t, dir, "packets.txt")))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, hx, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("packets.txt: bad line %q", line)
		}
		w, err := strconv.Atoi(id)
		if err != nil {
			t.Fatal(err)
		}
		p, err := hex.DecodeString(hx)
		if err != nil {
			t.Fatal(err)
		}
		out[uint16(w)] = append(out[uint16(w)], p)
	}
	return out
}

type goldenChunk struct {
	page, chunk int
	state       ChunkState
	hdr         ChunkHeader
}

// Expected chunk tables. Top level: README "Files"/"Binary layout" (A/0 at
// page 0 with count 6 flags 6, B/0 at page 1, A/1 and A/2 of the big
// packet at pages 2 and 3). pagediv4: the commit table's (page, chunk) ->
// writer/chunk_id mapping.
var goldenChunksDiv1 = []goldenChunk{
	{0, 0, ChunkComplete, ChunkHeader{ChunkID: 0, WriterID: 1, Count: 6, Flags: 6}},
	{1, 0, ChunkComplete, ChunkHeader{ChunkID: 0, WriterID: 2, Count: 5, Flags: 0}},
	{2, 0, ChunkComplete, ChunkHeader{ChunkID: 1, WriterID: 1, Count: 1, Flags: 3}},
	{3, 0, ChunkComplete, ChunkHeader{ChunkID: 2, WriterID: 1, Count: 5, Flags: 1}},
}

var goldenChunksDiv4 = []goldenChunk{
	{0, 0, ChunkComplete, ChunkHeader{ChunkID: 0, WriterID: 1, Count: 6, Flags: 6}},
	{0, 1, ChunkComplete, ChunkHeader{ChunkID: 0, WriterID: 2, Count: 2, Flags: 0}},
	{0, 2, ChunkComplete, ChunkHeader{ChunkID: 1, WriterID: 2, Count: 2, Flags: 0}},
	{0, 3, ChunkComplete, ChunkHeader{ChunkID: 1, WriterID: 1, Count: 1, Flags: 3}},
	{1, 0, ChunkComplete, ChunkHeader{ChunkID: 2, WriterID: 1, Count: 1, Flags: 3}},
	{1, 1, ChunkComplete, ChunkHeader{ChunkID: 3, WriterID: 1, Count: 1, Flags: 3}},
	{1, 2, ChunkComplete, ChunkHeader{ChunkID: 4, WriterID: 1, Count: 1, Flags: 3}},
	{1, 3, ChunkComplete, ChunkHeader{ChunkID: 5, WriterID: 1, Count: 1, Flags: 3}},
	{2, 0, ChunkComplete, ChunkHeader{ChunkID: 6, WriterID: 1, Count: 1, Flags: 3}},
	{2, 1, ChunkComplete, ChunkHeader{ChunkID: 7, WriterID: 1, Count: 1, Flags: 3}},
	{2, 2, ChunkComplete, ChunkHeader{ChunkID: 8, WriterID: 1, Count: 1, Flags: 3}},
	{2, 3, ChunkComplete, ChunkHeader{ChunkID: 9, WriterID: 1, Count: 1, Flags: 7}},
	{3, 0, ChunkComplete, ChunkHeader{ChunkID: 10, WriterID: 1, Count: 5, Flags: 1}},
	{3, 1, ChunkComplete, ChunkHeader{ChunkID: 2, WriterID: 2, Count: 2, Flags: 0}},
	{3, 2, ChunkComplete, ChunkHeader{ChunkID: 3, WriterID: 2, Count: 2, Flags: 0}},
}

var goldenSets = []struct {
	sub    string
	layout PageLayout
	chunks []goldenChunk
	// moves[i] lists commit i's (page, chunk) pairs; patches[i] its
	// (chunk_id, offset, data) triples.
	moves   [][][2]uint32
	patches [][]string
}{
	{"", LayoutDiv1, goldenChunksDiv1,
		[][][2]uint32{{{0, 0}, {2, 0}}, {{3, 0}}, {{1, 0}}},
		[][]string{{"0@197=89d08000", "0@225=ebcf8000"}, nil, nil}},
	{"pagediv4", LayoutDiv4, goldenChunksDiv4,
		[][][2]uint32{{{0, 1}}, {{0, 0}, {0, 3}, {1, 0}, {1, 1}, {1, 2}, {1, 3}, {2, 0}, {2, 1}, {2, 2}, {2, 3}}, {{0, 2}}, {{3, 1}}, {{3, 0}}, {{3, 2}}},
		[][]string{nil, {"0@197=89d08000", "0@225=ebcf8000", "9@945=ab838000"}, nil, nil, nil, nil}},
}

// decodeChunks lists every non-free chunk of an SMB.
func decodeChunks(t testing.TB, s *SMB) []goldenChunk {
	t.Helper()
	var out []goldenChunk
	for p := range s.NumPages() {
		bm := s.PageBitmap(p)
		if bm == 0 {
			continue
		}
		if bm&0x80000000 != 0 {
			t.Errorf("page %d: reserved bit 31 set", p)
		}
		if le32(s.Bytes()[p*s.PageSize()+4:]) != 0 {
			t.Errorf("page %d: reserved header word not zero", p)
		}
		l := LayoutOf(bm)
		for i := range l.NumChunks() {
			st := StateOf(bm, i)
			if st == ChunkFree {
				continue
			}
			h, _ := s.ReadChunkHeader(p, i)
			out = append(out, goldenChunk{p, int(i), st, h})
		}
	}
	return out
}

func TestGoldenSMBDecode(t *testing.T) {
	for _, set := range goldenSets {
		t.Run("set="+set.sub, func(t *testing.T) {
			dir := goldenDir(t, set.sub)
			s := loadSMB(t, readGolden(t, dir, "smb.bin"), 4096)
			if set.sub == "" {
				want, _ := hex.DecodeString("03000010000000000000000001000618")
				if !bytes.Equal(s.Bytes()[:16], want) {
					t.Errorf("first 16 bytes % x, want % x", s.Bytes()[:16], want)
				}
			}
			for p := range s.NumPages() {
				if bm := s.PageBitmap(p); bm != 0 && LayoutOf(bm) != set.layout {
					t.Errorf("page %d layout %d, want %d", p, LayoutOf(bm), set.layout)
				}
			}
			got := decodeChunks(t, s)
			if fmt.Sprint(got) != fmt.Sprint(set.chunks) {
				t.Errorf("chunks:\n got %v\nwant %v", got, set.chunks)
			}
			// Pre-flush: the two open chunks are BeingWritten.
			pre := loadSMB(t, readGolden(t, dir, "smb_preflush.bin"), 4096)
			open := 0
			for _, c := range decodeChunks(t, pre) {
				if c.state == ChunkBeingWritten {
					open++
				}
			}
			if open != 2 {
				t.Errorf("preflush: %d BeingWritten chunks, want 2", open)
			}
		})
	}
}

func TestGoldenCommitsDecode(t *testing.T) {
	for _, set := range goldenSets {
		t.Run("set="+set.sub, func(t *testing.T) {
			dir := goldenDir(t, set.sub)
			recs := splitRecords(t, readGolden(t, dir, "commits.bin"))
			if len(recs) != len(set.moves) {
				t.Fatalf("%d commits, want %d", len(recs), len(set.moves))
			}
			var cd CommitData
			for i, rec := range recs {
				if err := cd.Unmarshal(rec); err != nil {
					t.Fatalf("commit %d: %v", i, err)
				}
				var moves [][2]uint32
				for _, m := range cd.ChunksToMove {
					if m.TargetBuffer != 1 || m.Data != nil {
						t.Errorf("commit %d: move %+v", i, m)
					}
					moves = append(moves, [2]uint32{m.Page, m.Chunk})
				}
				if fmt.Sprint(moves) != fmt.Sprint(set.moves[i]) {
					t.Errorf("commit %d moves %v, want %v", i, moves, set.moves[i])
				}
				var patches []string
				for _, p := range cd.ChunksToPatch {
					if p.TargetBuffer != 1 || p.WriterID != 1 || p.HasMorePatches {
						t.Errorf("commit %d: patch group %+v", i, p)
					}
					for _, pp := range p.Patches {
						patches = append(patches, fmt.Sprintf("%d@%d=%x", p.ChunkID, pp.Offset, pp.Data))
					}
				}
				if fmt.Sprint(patches) != fmt.Sprint(set.patches[i]) {
					t.Errorf("commit %d patches %v, want %v", i, patches, set.patches[i])
				}
				if re := cd.AppendMarshal(nil); !bytes.Equal(re, rec) {
					t.Errorf("commit %d: re-marshal\n got % x\nwant % x", i, re, rec)
				}
			}
		})
	}
}

// checkPackets compares reassembled packets with packets.txt.
func checkPackets(t *testing.T, ra *reassembler, want map[uint16][][]byte) {
	t.Helper()
	for id, wp := range want {
		got, err := ra.packets(id)
		if err != nil {
			t.Fatal(err)
		}
		if got.lost != 0 {
			t.Errorf("writer %d: %d packets lost", id, got.lost)
		}
		if len(got.packets) != len(wp) {
			t.Fatalf("writer %d: %d packets, want %d", id, len(got.packets), len(wp))
		}
		for i := range wp {
			if !bytes.Equal(got.packets[i], wp[i]) {
				t.Errorf("writer %d packet %d differs:\n got %x\nwant %x", id, i, got.packets[i], wp[i])
			}
		}
	}
	if len(ra.chunks) != len(want) {
		t.Errorf("chunks from %d writers, want %d", len(ra.chunks), len(want))
	}
}

func TestGoldenReaderReassembly(t *testing.T) {
	for _, set := range goldenSets {
		t.Run("set="+set.sub, func(t *testing.T) {
			dir := goldenDir(t, set.sub)
			s := loadSMB(t, readGolden(t, dir, "smb.bin"), 4096)
			r := NewReader(s)
			ra := newReassembler()
			var cd CommitData
			for i, rec := range splitRecords(t, readGolden(t, dir, "commits.bin")) {
				if err := cd.Unmarshal(rec); err != nil {
					t.Fatalf("commit %d: %v", i, err)
				}
				r.ReadCommit(&cd, ra.addChunk, ra.applyPatch)
			}
			st := r.Stats()
			if st.TotalRejected() != 0 || st.PatchesDiscarded != 0 || ra.badPatches != 0 {
				t.Errorf("rejections: %+v, bad patches %d", st, ra.badPatches)
			}
			if int(st.ChunksRead) != len(set.chunks) {
				t.Errorf("read %d chunks, want %d", st.ChunksRead, len(set.chunks))
			}
			checkPackets(t, ra, readPacketsTxt(t, dir))
			// Every chunk was freed, so every page is free again.
			for p := range s.NumPages() {
				if bm := s.PageBitmap(p); bm != 0 {
					t.Errorf("page %d bitmap %#x after reading, want free", p, bm)
				}
			}
		})
	}
}
