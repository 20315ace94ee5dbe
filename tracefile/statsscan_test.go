package tracefile

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// scanPacket is a producer packet as the service writes it: a timestamp,
// a for_testing payload, the trusted fields with the loss mask.
func scanPacket(seq, dropped uint32, ts uint64) []byte {
	p := AppendTimestamp(nil, ts)
	p = protowire.AppendTag(p, FieldForTesting, protowire.BytesType)
	p = protowire.AppendString(p, "x")
	return AppendTrusted(p, Trusted{UID: 1000, SequenceID: seq, PreviousPacketDropped: dropped})
}

// scanTracePackets: five producer packets, three flagged (two on
// sequence 2, one on 3), an early TraceStats and the final one, whose
// buffer 0 overwrote 5 chunks.
func scanTracePackets() [][]byte {
	early := &TraceStats{BufferStats: make([]BufferStats, 1)}
	early.BufferStats[0].ChunksOverwritten = 999
	final := &TraceStats{BufferStats: make([]BufferStats, 1), FinalFlushOutcome: FlushOutcomeSucceeded}
	final.BufferStats[0].ChunksOverwritten = 5
	return [][]byte{
		scanPacket(2, 0, 100),
		scanPacket(2, LossPresent|LossOverwrite, 110),
		AppendTraceStatsPacket(nil, early, 0, 115),
		scanPacket(3, LossPresent|LossReadGap, 120),
		scanPacket(2, LossPresent|LossOverwrite, 130),
		scanPacket(3, 0, 140),
		AppendTraceStatsPacket(nil, final, 0, 150),
	}
}

func writeTraceFile(t *testing.T, name string, pkts [][]byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, encodeTrace(pkts), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// The scan keeps the last TraceStats (or every one), counts flagged
// packets per sequence and mask, and its verdict names both.
func TestScanStats(t *testing.T) {
	path := writeTraceFile(t, "t.pftrace", scanTracePackets())
	s, err := ScanStats(path, StatsScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Packets != 7 || s.StatsPackets != 2 || len(s.Stats) != 1 || s.Truncated != nil || s.BadPackets != 0 || s.BadStats != 0 {
		t.Fatalf("scan %+v", s)
	}
	if got := s.Last().Stats.BufferStats[0].ChunksOverwritten; got != 5 {
		t.Errorf("last TraceStats: chunks_overwritten %d, want the final 5", got)
	}
	if s.DroppedPackets != 3 || !slices.Equal(s.Sequences(), []uint32{2, 3}) ||
		s.Dropped[2][LossPresent|LossOverwrite] != 2 || s.Dropped[3][LossPresent|LossReadGap] != 1 {
		t.Errorf("flagged packets: %d %v", s.DroppedPackets, s.Dropped)
	}
	if got, want := s.LossSummary(), "buffer 0 chunks_overwritten=5, 3 packet(s) with previous_packet_dropped (sequence 2, 3)"; got != want {
		t.Errorf("LossSummary\n got %q\nwant %q", got, want)
	}
	if s.MultiMachine() || !slices.Equal(s.MachineIDs(), []uint32{0}) || s.Machines[0].Packets != 7 {
		t.Errorf("machines: %v %+v", s.MachineIDs(), s.Machines[0])
	}

	all, err := ScanStats(path, StatsScanOptions{KeepAll: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Stats) != 2 || all.Stats[0].Stats.BufferStats[0].ChunksOverwritten != 999 || all.Stats[0].Offset >= all.Stats[1].Offset {
		t.Errorf("KeepAll: %+v", all.Stats)
	}
}

// A cut trace is scanned up to its last whole packet: the truncation is
// recorded, not returned, and the earlier TraceStats is the last.
func TestScanStatsTruncated(t *testing.T) {
	b := encodeTrace(scanTracePackets())
	path := filepath.Join(t.TempDir(), "cut.pftrace")
	if err := os.WriteFile(path, b[:len(b)-3], 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := ScanStats(path, StatsScanOptions{})
	if err != nil || s == nil {
		t.Fatalf("scan %v, %v", s, err)
	}
	if !errors.Is(s.Truncated, ErrTruncated) || s.Packets != 6 || s.Last().Stats.BufferStats[0].ChunksOverwritten != 999 {
		t.Errorf("truncated scan: %+v", s)
	}
	if s, err := ScanStats(filepath.Join(t.TempDir(), "absent"), StatsScanOptions{}); s != nil || err == nil {
		t.Errorf("absent file: %v, %v", s, err)
	}
}

// A set added file by file reads as the trace the files were cut from:
// the same packets, flagged packets, last TraceStats and verdict.
func TestStatsScanAddIsTheSetAsOneTrace(t *testing.T) {
	pkts := scanTracePackets()
	dir := t.TempDir()
	whole, err := ScanStats(writeTraceFile(t, "whole.pftrace", pkts), StatsScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{filepath.Join(dir, "t.1.pftrace"), filepath.Join(dir, "t.pftrace")} // not in rotation order
	os.WriteFile(paths[0], encodeTrace(pkts[3:]), 0o644)
	os.WriteFile(paths[1], encodeTrace(pkts[:3]), 0o644)
	set := &StatsScan{}
	for _, p := range RotationOrder(paths) {
		s, err := ScanStats(p, StatsScanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		set.Add(s, false)
	}
	if set.Packets != whole.Packets || set.StatsPackets != whole.StatsPackets || set.DroppedPackets != whole.DroppedPackets ||
		!reflect.DeepEqual(set.Dropped, whole.Dropped) || !reflect.DeepEqual(set.Last().Stats, whole.Last().Stats) {
		t.Errorf("set %+v\nwhole %+v", set, whole)
	}
	if set.LossSummary() != whole.LossSummary() {
		t.Errorf("verdict: set %q, whole %q", set.LossSummary(), whole.LossSummary())
	}
}

// The set's summary is the sum of its files'.
func TestMergeSummary(t *testing.T) {
	pkts := scanTracePackets()
	sum := func(p [][]byte) *Summary {
		s, err := Summarize(strings.NewReader(string(encodeTrace(p))))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	whole := sum(pkts)
	set := MergeSummary(MergeSummary(nil, sum(pkts[:3])), sum(pkts[3:]))
	if set.Packets != whole.Packets || set.PreviousPacketDropped != whole.PreviousPacketDropped ||
		set.MinTimestamp != whole.MinTimestamp || set.MaxTimestamp != whole.MaxTimestamp ||
		set.TraceStatsPackets != whole.TraceStatsPackets || len(set.Sequences) != len(whole.Sequences) {
		t.Fatalf("set %+v\nwhole %+v", set, whole)
	}
	for i, q := range whole.Sequences {
		if a := set.Sequences[i]; a.ID != q.ID || a.Packets != q.Packets || a.PreviousPacketDropped != q.PreviousPacketDropped {
			t.Errorf("sequence %d: set %+v, whole %+v", q.ID, a, q)
		}
	}
}

// ReadFile hands a truncation to its callback with the records read
// before it, and names the file in fn's errors.
func TestReadFile(t *testing.T) {
	b := encodeTrace(scanTracePackets())
	path := filepath.Join(t.TempDir(), "cut.pftrace")
	if err := os.WriteFile(path, b[:len(b)-3], 0o644); err != nil {
		t.Fatal(err)
	}
	n, cut := 0, -1
	var cutErr error
	err := ReadFile(path, ReaderOptions{}, func(records int, err error) { cut, cutErr = records, err }, func(Record) error { n++; return nil })
	if err != nil || n != 6 || cut != 6 || !errors.Is(cutErr, ErrTruncated) {
		t.Errorf("ReadFile: err %v, %d records, truncation after %d (%v)", err, n, cut, cutErr)
	}
	stop := errors.New("stop")
	err = ReadFile(path, ReaderOptions{}, nil, func(Record) error { return stop })
	if !errors.Is(err, stop) || !strings.Contains(err.Error(), path) {
		t.Errorf("fn's error: %v", err)
	}
}
