package tracefile

import (
	"bytes"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"google.golang.org/protobuf/encoding/protowire"
)

func seqPacket(seq uint32, ts uint64) []byte {
	var p []byte
	p = protowire.AppendTag(p, FieldTimestamp, protowire.VarintType)
	p = protowire.AppendVarint(p, ts)
	p = protowire.AppendTag(p, FieldTrustedSequenceID, protowire.VarintType)
	return protowire.AppendVarint(p, uint64(seq))
}

func TestSummarySequencesBounded(t *testing.T) {
	const n, bound = 5000, 100
	var b []byte
	for i := 0; i < n; i++ {
		b = AppendRecord(b, seqPacket(uint32(i+2), uint64(1000+i)))
	}
	s, err := SummarizeOptions(bytes.NewReader(b), SummaryOptions{MaxSequences: bound, FirstN: -1})
	if err != nil {
		t.Fatal(err)
	}
	if s.Packets != n || len(s.Sequences) != bound+1 {
		t.Fatalf("%d packets, %d rows", s.Packets, len(s.Sequences))
	}
	others := s.Sequences[bound]
	if !others.Summarised || others.ID != SummarisedSequenceID || others.Packets != n-bound {
		t.Fatalf("summary row %+v", others)
	}
	if others.MinTimestamp != 1000+bound || others.MaxTimestamp != 1000+n-1 {
		t.Fatalf("summary row time range %d..%d", others.MinTimestamp, others.MaxTimestamp)
	}
	if d := s.SummarisedSequences - (n - bound); d > (n-bound)/20 || d < -(n-bound)/20 {
		t.Fatalf("estimated %d summarised sequences, want about %d", s.SummarisedSequences, n-bound)
	}
	var out bytes.Buffer
	if err := s.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sequences beyond the 100 tracked", "--max-sequences", "\nothers "} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q", want)
		}
	}
	s, err = SummarizeOptions(bytes.NewReader(b), SummaryOptions{MaxSequences: n, FirstN: -1})
	if err != nil || len(s.Sequences) != n || s.SummarisedSequences != 0 {
		t.Fatalf("within the bound: %d rows, %d summarised, %v", len(s.Sequences), s.SummarisedSequences, err)
	}
}

// TestSummaryBigRecordGzipBounded: inspect's summary of a gzip file with
// one 64 MiB packet counts it in full and allocates a fraction of it.
func TestSummaryBigRecordGzipBounded(t *testing.T) {
	const n = 64 << 20
	var file bytes.Buffer
	zw := gzip.NewWriter(&file)
	writeBigTrace(t, zw, n)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s, err := SummarizeOptions(bytes.NewReader(file.Bytes()), SummaryOptions{})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > n/4 {
		t.Fatalf("summarising allocated %d bytes for a %d-byte record", alloc, n)
	}
	wantSize := int64(len(bigPacketHeader(n)) + n)
	if s.Packets != 3 || s.Bytes != wantSize+4 || s.ElidedPackets != 1 || s.Kinds["for_testing"] != 1 || s.BadPackets != 0 {
		t.Fatalf("summary %+v", s)
	}
	if !strings.Contains(s.First[1].Text, "skipped unread") {
		t.Fatalf("first packets do not say the big one was not read whole:\n%s", s.First[1].Text)
	}
	var out bytes.Buffer
	if err := s.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "packets not read whole:") {
		t.Fatal("output does not report the packet not read whole")
	}
}

// A trace_stats packet too big to hold is counted as not decoded, never
// shown as a TraceStats of zeros.
func TestSummaryElidedTraceStats(t *testing.T) {
	ts := fullTraceStats()
	pkt := AppendTraceStatsPacket(nil, &ts, 0, 1)
	s, err := SummarizeOptions(bytes.NewReader(AppendRecord(nil, pkt)), SummaryOptions{MaxPacketBuffer: 64})
	if err != nil {
		t.Fatal(err)
	}
	if s.LastTraceStats != nil || s.BadPackets != 1 || s.TraceStatsPackets != 1 || s.ElidedPackets != 1 {
		t.Fatalf("summary %+v", s)
	}
}
