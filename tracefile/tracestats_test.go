package tracefile

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// TestBufferStatsFieldNumbers pins every BufferStats field number to
// trace-buffer-v2.md §13 / trace-format.md §4, independently of the table.
func TestBufferStatsFieldNumbers(t *testing.T) {
	want := map[string]protowire.Number{
		"bytes_written": 1, "chunks_written": 2, "chunks_overwritten": 3, "write_wrap_count": 4,
		"patches_succeeded": 5, "patches_failed": 6, "readaheads_succeeded": 7, "readaheads_failed": 8,
		"abi_violations": 9, "chunks_rewritten": 10, "chunks_committed_out_of_order": 11,
		"buffer_size": 12, "bytes_overwritten": 13, "bytes_read": 14, "padding_bytes_written": 15,
		"padding_bytes_cleared": 16, "chunks_read": 17, "chunks_discarded": 18,
		"trace_writer_packet_loss": 19, "chunks_relocated": 20,
	}
	if len(bufferStatsFields) != len(want) {
		t.Fatalf("%d BufferStats fields, want %d", len(bufferStatsFields), len(want))
	}
	for _, f := range bufferStatsFields {
		if want[f.name] != f.num {
			t.Errorf("%s = %d, want %d", f.name, f.num, want[f.name])
		}
	}
	wantTS := map[string]protowire.Number{
		"producers_connected": 2, "producers_seen": 3, "data_sources_registered": 4, "data_sources_seen": 5,
		"tracing_sessions": 6, "total_buffers": 7, "chunks_discarded": 8, "patches_discarded": 9,
		"invalid_packets": 10, "flushes_requested": 12, "flushes_succeeded": 13, "flushes_failed": 14,
		"final_flush_outcome": 15,
	}
	for _, f := range traceStatsFields {
		if wantTS[f.name] != f.num {
			t.Errorf("TraceStats.%s = %d, want %d", f.name, f.num, wantTS[f.name])
		}
	}
	// Each Go field is wired to a distinct counter.
	var bs BufferStats
	for i, f := range bufferStatsFields {
		*f.ptr(&bs) = uint64(i + 1)
	}
	v := reflect.ValueOf(bs)
	seen := map[uint64]bool{}
	for i := 0; i < v.NumField(); i++ {
		x := v.Field(i).Uint()
		if x == 0 || seen[x] {
			t.Fatalf("BufferStats.%s not wired uniquely (value %d)", v.Type().Field(i).Name, x)
		}
		seen[x] = true
	}
}

func fullTraceStats() TraceStats {
	ts := TraceStats{
		ProducersConnected: 2, ProducersSeen: 3, DataSourcesRegistered: 4, DataSourcesSeen: 5,
		TracingSessions: 6, TotalBuffers: 7, ChunksDiscarded: 8, PatchesDiscarded: 9, InvalidPackets: 10,
		FlushesRequested: 12, FlushesSucceeded: 13, FlushesFailed: 14, FinalFlushOutcome: FlushOutcomeFailed,
		ChunkPayloadHistogramDef: ChunkPayloadHistogramBounds,
		FilterStats:              &FilterStats{InputPackets: 1, InputBytes: 2, OutputBytes: 3, Errors: 4, TimeTakenNs: 5, BytesDiscardedPerBuffer: []uint64{6, 7}},
		WriterStats: []WriterStats{{SequenceID: 2, Buffer: 1, HistogramCounts: []uint64{1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 9},
			HistogramSum: []int64{8, 60, 0, 0, 0, 0, 0, 0, 0, 0, 1 << 40}}},
	}
	for b := 0; b < 2; b++ {
		var bs BufferStats
		for i, f := range bufferStatsFields {
			*f.ptr(&bs) = uint64(1000*b + 100 + i)
		}
		ts.BufferStats = append(ts.BufferStats, bs)
	}
	return ts
}

func TestTraceStatsRoundTrip(t *testing.T) {
	ts := fullTraceStats()
	pkt := AppendTraceStatsPacket(nil, &ts, 9999, 123456)
	info, err := DecodePacket(pkt)
	if err != nil {
		t.Fatal(err)
	}
	if info.Kind() != "trace_stats" || info.SequenceID != 1 || info.TrustedUID != 9999 || info.TimestampClockID != 6 || info.Timestamp != 123456 {
		t.Fatalf("header %+v", info)
	}
	got, ok, err := DecodeTraceStatsPacket(pkt)
	if err != nil || !ok {
		t.Fatalf("decode: ok=%v %v", ok, err)
	}
	if !reflect.DeepEqual(got, ts) {
		t.Fatalf("round trip\n got %+v\nwant %+v", got, ts)
	}
	// A packet without trace_stats.
	if _, ok, err := DecodeTraceStatsPacket([]byte{0x40, 0x01}); ok || err != nil {
		t.Fatalf("non-stats packet: ok=%v err=%v", ok, err)
	}
}

// TestTraceStatsWireBytes checks a few exact encodings so that a wrong
// field number cannot hide behind a symmetric encoder/decoder.
func TestTraceStatsWireBytes(t *testing.T) {
	ts := TraceStats{BufferStats: []BufferStats{{ChunksOverwritten: 5, TraceWriterPacketLoss: 7}}}
	b := AppendTraceStats(nil, &ts)
	if b[0] != 0x9a || b[1] != 0x02 { // field 35, LEN
		t.Fatalf("trace_stats tag % x", b[:2])
	}
	if !bytes.Contains(b, []byte{0x18, 0x05}) || !bytes.Contains(b, []byte{0x98, 0x01, 0x07}) {
		t.Fatalf("chunks_overwritten (3) / trace_writer_packet_loss (19) not found in % x", b)
	}
	// Packed and unpacked repeated fields decode alike.
	body := []byte{0x88, 0x01, 0x08, 0x88, 0x01, 0x20}                                                // 17: 8, 17: 32 (unpacked)
	body = append(body, 0x92, 0x01, 0x05, 0x08, 0x03, 0x12, 0x01, 0x02, 0x92, 0x01, 0x02, 0x20, 0x01) // 18: {1: 3, 2: packed [2]}, 18: {4: 1}
	got, err := DecodeTraceStats(body)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.ChunkPayloadHistogramDef, []int64{8, 32}) || len(got.WriterStats) != 2 ||
		got.WriterStats[0].SequenceID != 3 || got.WriterStats[0].HistogramCounts[0] != 2 || got.WriterStats[1].Buffer != 1 {
		t.Fatalf("decoded %+v", got)
	}
}

func TestTraceStatsMalformed(t *testing.T) {
	ts := fullTraceStats()
	body := AppendTraceStats(nil, &ts)
	_, _, n := protowire.ConsumeTag(body)
	payload, _ := protowire.ConsumeBytes(body[n:])
	for cut := 1; cut < len(payload); cut += 7 {
		_, err := DecodeTraceStats(payload[:cut])
		if err != nil && !errors.Is(err, ErrBadTraceStats) {
			t.Fatalf("cut %d: unclassified %v", cut, err)
		}
	}
	_, err := DecodeTraceStats([]byte{0x0a, 0x05, 0x08})
	if !errors.Is(err, ErrBadTraceStats) || !strings.Contains(err.Error(), "offset 0") {
		t.Fatalf("bad length: %v", err)
	}
}

func TestLossReport(t *testing.T) {
	ts := fullTraceStats()
	rows := LossReport(ts)
	if want := len(traceStatsFields) + 2*len(bufferStatsFields) + len(filterStatsFields) + 2; len(rows) != want {
		t.Fatalf("%d rows, want %d", len(rows), want)
	}
	find := func(name string, idx int) LossRow {
		for _, r := range rows {
			if r.Name == name && r.Index == idx {
				return r
			}
		}
		t.Fatalf("no row %s[%d]", name, idx)
		return LossRow{}
	}
	dataLoss := []string{"chunks_overwritten", "bytes_overwritten", "chunks_discarded", "patches_failed", "abi_violations", "trace_writer_packet_loss"}
	for _, name := range dataLoss {
		r := find(name, 1)
		if r.Severity != SeverityDataLoss {
			t.Errorf("%s: severity %s", name, r.Severity)
		}
	}
	for _, name := range []string{"bytes_written", "readaheads_failed", "chunks_read", "buffer_size"} {
		if r := find(name, 0); r.Severity != SeverityInfo {
			t.Errorf("%s: severity %s", name, r.Severity)
		}
	}
	if r := find("chunks_overwritten", 1); r.Value != ts.BufferStats[1].ChunksOverwritten {
		t.Errorf("value %d", r.Value)
	}
	for _, name := range []string{"chunks_discarded", "patches_discarded", "invalid_packets", "final_flush_outcome"} {
		if r := find(name, -1); r.Severity != SeverityDataLoss || !r.Lost() {
			t.Errorf("service %s: %+v", name, r)
		}
	}
	if r := find("filter_bytes_discarded", 1); r.Value != 7 {
		t.Errorf("filter_bytes_discarded[1] = %d", r.Value)
	}
	if !HasDataLoss(rows) {
		t.Error("HasDataLoss false")
	}
	// Successful final flush and a clean buffer: no loss.
	clean := LossReport(TraceStats{FinalFlushOutcome: FlushOutcomeSucceeded, BufferStats: []BufferStats{{BytesWritten: 10}}})
	if HasDataLoss(clean) {
		t.Errorf("clean report has loss: %+v", clean)
	}
	var out bytes.Buffer
	if err := WriteLossTable(&out, rows); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if !strings.Contains(s, "DATA LOSS") || !strings.Contains(s, "buffer 1") || !strings.Contains(s, "trace_writer_packet_loss") {
		t.Fatalf("table:\n%s", s)
	}
	lines := strings.Split(s, "\n")
	col := strings.Index(lines[0], "COUNTER")
	for _, l := range lines[1 : len(rows)+1] {
		if len(l) <= col || l[col-1] != ' ' || l[col] == ' ' {
			t.Fatalf("column COUNTER not aligned at %d in %q", col, l)
		}
	}
}

// TestTracepipeStatsExtension checks tracepipe's own counters: field 1000
// on the wire, a lossless round trip, and their rows in the loss report.
func TestTracepipeStatsExtension(t *testing.T) {
	ts := TraceStats{Tracepipe: &TracepipeStats{ProducerPacketsDropped: 3, SinkPacketsWritten: 40, SinkPacketsDropped: 2, ReadbackDeferred: 5, SequenceRestores: 7}}
	b := AppendTraceStats(nil, &ts)
	// trace_stats header (2 bytes tag + 1 byte length), then field 1000 LEN: tag varint 0xc2 0x3e.
	if !bytes.Contains(b, []byte{0xc2, 0x3e}) {
		t.Fatalf("field 1000 tag not found in % x", b)
	}
	if !bytes.Contains(b, []byte{0x78, 0x07}) { // sequence_restores: field 15 = 7
		t.Fatalf("sequence_restores (15) not found in % x", b)
	}
	info, err := DecodePacket(b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeTraceStats(info.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Tracepipe, ts.Tracepipe) {
		t.Fatalf("round trip %+v, want %+v", got.Tracepipe, ts.Tracepipe)
	}
	rows := LossReport(got)
	if len(rows) != len(traceStatsFields)+len(tracepipeStatsFields) {
		t.Fatalf("%d rows", len(rows))
	}
	bySev := map[string]string{}
	for _, r := range rows {
		bySev[r.Name] = r.Severity
		if r.Name == "sink_packets_written" && r.Value != 40 {
			t.Errorf("sink_packets_written = %d", r.Value)
		}
		if r.Name == "sequence_restores" && r.Value != 7 {
			t.Errorf("sequence_restores = %d", r.Value)
		}
	}
	for name, want := range map[string]string{"producer_packets_dropped": SeverityDataLoss, "sink_packets_dropped": SeverityDataLoss,
		"readback_deferred": SeverityInfo, "sink_packets_written": SeverityInfo, "protovm_patches_failed": SeverityInfo,
		"sequence_restores": SeverityInfo} {
		if bySev[name] != want {
			t.Errorf("%s: severity %q, want %q", name, bySev[name], want)
		}
	}
	if !HasDataLoss(rows) {
		t.Error("producer drops not reported as loss")
	}
}
