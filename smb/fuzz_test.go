package smb

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fuzzSMBSize keeps fuzz inputs small: the fuzzer minimizes every new
// interesting input, which is slow for large ones.
const fuzzSMBSize = 2 * 4096

// fuzzSMB builds a 2-page SMB holding raw, zero-padded.
func fuzzSMB(t testing.TB, raw []byte) *SMB {
	s, err := NewHeapSMB(fuzzSMBSize, 4096)
	if err != nil {
		t.Fatal(err)
	}
	copy(s.Bytes(), raw)
	return s
}

// sampleSMB writes a few packets (one fragmented, one with a patch) with
// the given layout and returns the SMB bytes and the marshalled commits
// concatenated into one request (the writer leaves chunks Complete because
// nothing reads them).
func sampleSMB(t testing.TB, layout PageLayout, flush bool) (smbBytes, commit []byte) {
	s, _ := NewHeapSMB(fuzzSMBSize, 4096)
	var all CommitData
	arb, _ := NewArbiter(s, ArbiterOptions{Layout: layout, Commit: CommitBatched, OnCommit: func(cd *CommitData) {
		all.ChunksToMove = append(all.ChunksToMove, cd.ChunksToMove...)
		for _, p := range cd.ChunksToPatch {
			p.Patches = append([]Patch(nil), p.Patches...)
			all.ChunksToPatch = append(all.ChunksToPatch, p)
		}
	}})
	w1, _ := arb.NewTraceWriter(1, Drop)
	w2, _ := arb.NewTraceWriter(2, Drop)
	w1.WritePacket([]byte("\x40\x01small"))
	p := w2.NewTracePacket()
	n := p.BeginNested(5)
	n.AppendBytes(1, bytes.Repeat([]byte("xy"), 700))
	p.Finish()
	w1.WritePacket(bytes.Repeat([]byte{7}, 300))
	if flush {
		w1.Flush()
		w2.Flush()
	}
	arb.FlushPendingCommits()
	all.FlushRequestID = 9
	return bytes.TrimRight(s.Bytes(), "\x00"), all.AppendMarshal(nil)
}

// checkView asserts the reader's promises about a chunk it handed out.
func checkView(t *testing.T, v *ChunkView, chunkPayload int) {
	if v.WriterID == 0 || v.WriterID > MaxWriterID {
		t.Fatalf("bad writer id %d handed out", v.WriterID)
	}
	if len(v.Payload) > chunkPayload {
		t.Fatalf("payload %d bytes > chunk payload %d", len(v.Payload), chunkPayload)
	}
	end, n, aborted, why := ParseFragments(v.Payload, int(v.Fragments))
	if why >= 0 || n != int(v.Fragments) || end != len(v.Payload) || aborted {
		t.Fatalf("payload does not hold exactly %d fragments: end %d/%d n %d why %v", v.Fragments, end, len(v.Payload), n, why)
	}
	if v.Flags&^FlagsMask != 0 {
		t.Fatalf("undefined flags %#x handed out", v.Flags)
	}
}

func FuzzCommitDataUnmarshal(f *testing.F) {
	_, c := sampleSMB(f, LayoutDiv1, true)
	f.Add(c)
	f.Add([]byte{0x0a, 0x06, 0x08, 0x00, 0x10, 0x00, 0x18, 0x01, 0x18, 0x05})
	f.Fuzz(func(t *testing.T, b []byte) {
		var cd CommitData
		err := cd.Unmarshal(b)
		if err != nil {
			if !strings.Contains(err.Error(), "at byte") {
				t.Fatalf("error without offset: %v", err)
			}
			return
		}
		if len(cd.ChunksToMove)+len(cd.ChunksToPatch) > len(b)/2 {
			t.Fatalf("%d entries from %d bytes", len(cd.ChunksToMove)+len(cd.ChunksToPatch), len(b))
		}
		m1 := cd.AppendMarshal(nil)
		var cd2 CommitData
		if err := cd2.Unmarshal(m1); err != nil {
			t.Fatalf("re-decoding our own encoding: %v", err)
		}
		if m2 := cd2.AppendMarshal(nil); !bytes.Equal(m1, m2) {
			t.Fatalf("encoding not stable:\n%x\n%x", m1, m2)
		}
	})
}

func FuzzChunkReader(f *testing.F) {
	for _, l := range []PageLayout{LayoutDiv1, LayoutDiv4, LayoutDiv14} {
		s, c := sampleSMB(f, l, true)
		f.Add(s, c)
	}
	f.Add(make([]byte, 16), []byte{0x0a, 0x00})
	f.Fuzz(func(t *testing.T, raw, commit []byte) {
		if len(raw) > fuzzSMBSize || len(commit) > 4096 {
			return
		}
		s := fuzzSMB(t, raw)
		var cd CommitData
		if cd.Unmarshal(commit) != nil {
			// Still exercise the reader: derive moves from the bytes.
			cd.Reset()
			for i := 0; i+1 < len(commit) && i < 64; i += 2 {
				cd.ChunksToMove = append(cd.ChunksToMove, ChunkToMove{Page: uint32(commit[i] % 3), Chunk: uint32(commit[i+1] % 15)})
			}
		}
		r := NewReader(s)
		r.ReadCommit(&cd, func(v *ChunkView) {
			checkView(t, v, MaxPageSize-ChunkHeaderSize) // emulated chunks may be up to 64 KiB
		}, func(p *ChunkToPatch) {
			if p.WriterID == 0 || p.WriterID > MaxWriterID || len(p.Patches) > MaxPatchesPerChunk {
				t.Fatalf("invalid patch group handed out: %+v", p)
			}
		})
		st := r.Stats()
		if got := st.ChunksRead + st.TotalRejected() - st.Rejected[RejectReleaseFailed]; got != uint64(len(cd.ChunksToMove)) {
			t.Fatalf("%d moves but %d read + rejected", len(cd.ChunksToMove), got)
		}
		r.Scrape(func(v *ChunkView) { checkView(t, v, 4096-16) })
	})
}

func FuzzScrape(f *testing.F) {
	for _, l := range []PageLayout{LayoutDiv1, LayoutDiv2, LayoutDiv7} {
		s, _ := sampleSMB(f, l, false)
		f.Add(s)
	}
	f.Add([]byte{1, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 3, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > fuzzSMBSize {
			return
		}
		s := fuzzSMB(t, raw)
		before := bytes.Clone(s.Bytes())
		r := NewReader(s)
		whole := map[[2]uint32]bool{} // chunks handed out Complete
		r.Scrape(func(v *ChunkView) {
			checkView(t, v, 4096-16)
			if !v.Complete && v.Flags&FlagLastPacketContinuesOnNextChunk != 0 {
				t.Fatal("incomplete chunk handed out with LastPacketContinuesOnNextChunk")
			}
			if v.Complete {
				whole[[2]uint32{v.Page, v.Index}] = true
			}
		})
		if !bytes.Equal(before, s.Bytes()) {
			t.Fatal("Scrape changed the SMB")
		}
		// A Complete chunk is handed out once: not by a second scrape,
		// not by its commit.
		again := func(v *ChunkView) {
			if v.Complete && whole[[2]uint32{v.Page, v.Index}] {
				t.Fatalf("page %d chunk %d handed out Complete twice", v.Page, v.Index)
			}
		}
		r.Scrape(again)
		var cd CommitData
		for p := range s.NumPages() {
			for i := range LayoutOf(s.PageBitmap(p)).NumChunks() {
				cd.ChunksToMove = append(cd.ChunksToMove, ChunkToMove{Page: uint32(p), Chunk: i, TargetBuffer: 1})
			}
		}
		r.ReadCommit(&cd, again, nil)
	})
}

var genCorpus = flag.Bool("gencorpus", false, "rewrite the seed corpora under testdata/fuzz")

// TestGenerateFuzzCorpus writes the committed seed corpora (run with
// -gencorpus); without the flag it checks they exist.
func TestGenerateFuzzCorpus(t *testing.T) {
	type entry struct {
		target string
		name   string
		args   [][]byte
	}
	var es []entry
	for i, l := range []PageLayout{LayoutDiv1, LayoutDiv4, LayoutDiv14} {
		s, c := sampleSMB(t, l, i != 1)
		es = append(es,
			entry{"FuzzCommitDataUnmarshal", fmt.Sprintf("writer-commit-layout%d", l), [][]byte{c}},
			entry{"FuzzChunkReader", fmt.Sprintf("writer-smb-layout%d", l), [][]byte{s, c}},
			entry{"FuzzScrape", fmt.Sprintf("writer-smb-layout%d", l), [][]byte{s}})
	}
	es = append(es,
		entry{"FuzzCommitDataUnmarshal", "vector4", [][]byte{unhex(t, "0a 06 08 00 10 00 18 01 12 10 08 01 10 01 18 07 22 08 08 11 12 04 8c 80 80 00 18 05")}},
		entry{"FuzzCommitDataUnmarshal", "bad-patch-length", [][]byte{unhex(t, "12 0e 08 01 10 01 18 07 22 07 08 11 12 03 8c 80 80")}},
		entry{"FuzzCommitDataUnmarshal", "truncated", [][]byte{unhex(t, "0a 06 08 00 10")}})
	for _, e := range es {
		path := filepath.Join("testdata", "fuzz", e.target, e.name)
		if !*genCorpus {
			if _, err := os.Stat(path); err != nil {
				t.Errorf("seed corpus file missing (run go test -run TestGenerateFuzzCorpus -gencorpus): %v", err)
			}
			continue
		}
		var sb strings.Builder
		sb.WriteString("go test fuzz v1\n")
		for _, a := range e.args {
			fmt.Fprintf(&sb, "[]byte(%q)\n", a)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
