package tpimport

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	. "github.com/tracepipe/tracepipe/internal/tracebuild"
	"github.com/tracepipe/tracepipe/tracefile"
)

// distinctSequencePacket is one self-contained packet of sequence seq: it
// clears the incremental state, interns a name and uses it, so a checker
// that keeps no state across packets still predicts it imported.
func distinctSequencePacket(seq uint32) []byte {
	return Packet(Seq(seq), Ts(1001*ms), Flags(Cleared|Needs), Interned(EventName(1, "e")), Event(SliceBegin, 100, 1))
}

// writeDistinctSequences writes the §8 prefix and then one packet on each
// of n distinct sequences (3, 4, ...) to a file in dir.
func writeDistinctSequences(t testing.TB, dir string, n int) string {
	t.Helper()
	path := filepath.Join(dir, "seqs.pftrace")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	tw := tracefile.NewWriter(w)
	for _, p := range prefix() {
		if err := tw.WritePacket(p); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		if err := tw.WritePacket(distinctSequencePacket(uint32(3 + i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheckSummarisesSequencesBeyondBound(t *testing.T) {
	const n, bound = 30_000, 1000
	path := writeDistinctSequences(t, t.TempDir(), n)
	r, err := CheckFile(path, Options{MaxSequences: bound})
	if err != nil {
		t.Fatal(err)
	}
	if r.Packets != n+2 {
		t.Fatalf("%d packets, want %d", r.Packets, n+2)
	}
	if len(r.Sequences) != bound+1 {
		t.Fatalf("%d sequence rows, want %d tracked + 1 summary", len(r.Sequences), bound)
	}
	beyond := r.Sequences[len(r.Sequences)-1]
	if !beyond.Summarised || beyond.ID != beyondSeq {
		t.Fatalf("last row %+v is not the summary", beyond)
	}
	wantBeyond := int64(n + 2 - bound)
	if r.SummarisedPackets != wantBeyond || beyond.Packets != wantBeyond {
		t.Fatalf("summarised packets %d (row %d), want %d", r.SummarisedPackets, beyond.Packets, wantBeyond)
	}
	if d := r.SummarisedSequences - wantBeyond; d > wantBeyond/20 || d < -wantBeyond/20 {
		t.Fatalf("summarised sequences estimated %d, want about %d", r.SummarisedSequences, wantBeyond)
	}
	// Self-contained packets import whether tracked or summarised: no
	// false skips, no false unresolved iids.
	if beyond.Imported != wantBeyond || beyond.NeedsSkipped != 0 || beyond.Unresolved != nil {
		t.Fatalf("summary row %+v", beyond)
	}
	wantCodes(t, r, CodeSequencesSummarised)
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sequences beyond the 1000 tracked: their per-sequence checks were summarised", "--max-sequences", "  others "} {
		if !strings.Contains(text.String(), want) {
			t.Fatalf("report lacks %q:\n%s", want, lastLines(text.String(), 5))
		}
	}
	// Within the bound, nothing is summarised.
	r, err = CheckFile(path, Options{MaxSequences: n + 2})
	if err != nil {
		t.Fatal(err)
	}
	if r.SummarisedPackets != 0 || len(r.Sequences) != n+2 {
		t.Fatalf("bound %d: %d rows, %d summarised packets", n+2, len(r.Sequences), r.SummarisedPackets)
	}
	wantCodes(t, r)
}

// TestCheckerMemoryBoundedBySequences feeds 200,000 distinct sequences to
// a Checker tracking 1,000: its live heap stays a small fraction of what
// tracking all of them costs (about 500 bytes each).
func TestCheckerMemoryBoundedBySequences(t *testing.T) {
	const n, bound = 200_000, 1000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c := NewChecker(Options{MaxSequences: bound})
	for i, p := range prefix() {
		c.Packet(p, int64(i))
	}
	var pkt []byte
	for i := 0; i < n; i++ {
		pkt = append(pkt[:0], distinctSequencePacket(uint32(3+i))...)
		c.Packet(pkt, int64(i+2))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if len(c.seqs) > bound {
		t.Fatalf("%d sequences tracked, bound %d", len(c.seqs), bound)
	}
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if grown > 8<<20 {
		t.Fatalf("live heap grew by %d bytes for %d sequences tracking %d", grown, n, bound)
	}
	r := c.Finish()
	if r.SummarisedPackets != n+2-bound {
		t.Fatalf("summarised %d packets", r.SummarisedPackets)
	}
}

// TestCheckSkipsOversizedFieldUnread: a packet larger than the packet
// buffer is counted in full, its kept header checked, its big field
// skipped and reported.
func TestCheckSkipsOversizedFieldUnread(t *testing.T) {
	big := Message(String(1, strings.Repeat("a", 1<<20))) // TestEvent.str
	file := Trace(append(prefix(), Packet(Seq(2), Ts(1001*ms), ForTesting(big)), Packet(Seq(2), Ts(1002*ms), ForTesting(nil)))...)
	r, err := Check(bytes.NewReader(file), Options{MaxPacketBuffer: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	whole, err := Check(bytes.NewReader(file), Options{MaxPacketBuffer: -1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Packets != 4 || r.Bytes != whole.Bytes || r.ElidedPackets != 1 || r.ElidedBytes < 1<<20 {
		t.Fatalf("packets %d bytes %d (whole %d) elided %d/%d", r.Packets, r.Bytes, whole.Bytes, r.ElidedPackets, r.ElidedBytes)
	}
	if s := r.Sequence(2); s == nil || s.Imported != whole.Sequence(2).Imported {
		t.Fatalf("sequence 2: %+v, whole %+v", s, whole.Sequence(2))
	}
	wantCodes(t, whole)
	wantCodes(t, r, CodePacketFieldsSkipped)
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}
