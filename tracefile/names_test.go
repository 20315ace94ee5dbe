package tracefile

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/internal/wire"
)

// The dump names nested fields and enum values, tracepipe's trigger
// packets and times; before, nested fields were numbers
// ("clock_snapshot { 1 { 1: 6") and triggers "field_46"/"field_113".
func TestDumpNamesNestedFields(t *testing.T) {
	clock := AppendClockSnapshot(nil, []Clock{{ID: ClockBoottime, Timestamp: 1_500_000_000}}, ClockBoottime)
	trig := wire.AppendNested(AppendTimestamp(nil, 2_000_000_000), FieldCloneSnapshotTrigger, func(b []byte) []byte {
		return wire.AppendString(b, 1, "sigusr1")
	})
	act := wire.AppendNested(nil, FieldTrigger, func(b []byte) []byte { return wire.AppendString(b, 1, "oom") })
	cfg := AppendTraceConfig(nil, &TraceConfig{Buffers: []TraceConfigBuffer{{SizeKB: 64, Discard: true}}, WriteIntoFile: true, FileWritePeriodMs: 1000})
	stats := AppendTraceStats(nil, &TraceStats{BufferStats: []BufferStats{{ChunksOverwritten: 3}}, FinalFlushOutcome: FlushOutcomeFailed})
	ev := wire.AppendNested(wire.AppendVarint(nil, FieldSequenceFlags, 3), FieldTrackEvent, func(b []byte) []byte {
		b = wire.AppendVarint(b, 9, 4)
		return wire.AppendVarint(b, 30, uint64(^uint64(0))) // counter_value -1
	})
	for _, c := range []struct {
		pkt  []byte
		want []string
	}{
		{clock, []string{"clock_snapshot {", "  clocks {", "    clock_id: BOOTTIME (6)", "    timestamp: 1500000000 (1.5s)", "  primary_trace_clock: BOOTTIME (6)"}},
		{trig, []string{"timestamp: 2000000000 (2s since boot)", "clone_snapshot_trigger {", `  trigger_name: "sigusr1"`}},
		{act, []string{"trigger {", `  trigger_name: "oom"`}},
		{cfg, []string{"trace_config {", "    fill_policy: DISCARD (2)", "  write_into_file: true", "  file_write_period_ms: 1000"}},
		{stats, []string{"trace_stats {", "  buffer_stats {", "    chunks_overwritten: 3", "  final_flush_outcome: FAILED (2)"}},
		{ev, []string{"sequence_flags: 3 (INCREMENTAL_STATE_CLEARED|NEEDS_INCREMENTAL_STATE)", "  type: COUNTER (4)", "  counter_value: -1"}},
	} {
		dump := DumpPacket(c.pkt)
		for _, w := range c.want {
			if !strings.Contains(dump, w+"\n") {
				t.Errorf("dump lacks %q:\n%s", w, dump)
			}
		}
		if strings.Contains(dump, "field_") || strings.Contains(dump, " 1: ") {
			t.Errorf("dump has unnamed fields:\n%s", dump)
		}
	}
	if k := PacketFieldName(FieldCloneSnapshotTrigger); k != "clone_snapshot_trigger" {
		t.Errorf("kind of field 113 = %q", k)
	}
	// A REALTIME clock's reading is shown as a date.
	wallClock := AppendClockSnapshot(nil, []Clock{{ID: 1, Timestamp: 1795766347167680561}}, ClockBoottime)
	if d := DumpPacket(wallClock); !strings.Contains(d, "timestamp: 1795766347167680561 (2026-11-27 07:59:07.167680561 UTC)\n") {
		t.Errorf("wall clock: %s", d)
	}
	// Unknown nested fields still print by number.
	unk := wire.AppendNested(nil, FieldTrackEvent, func(b []byte) []byte { return wire.AppendVarint(b, 999, 7) })
	if d := DumpPacket(unk); !strings.Contains(d, "  999: 7\n") {
		t.Errorf("unknown field: %s", d)
	}
}

// A ring buffer read once overwrites by design: the headline says so and
// marks the rows "~"; the same counters in a streaming session (or a
// discard buffer, or without a known config) are data loss.
func TestLossContextRingOverwrites(t *testing.T) {
	rows := LossReport(TraceStats{BufferStats: []BufferStats{{ChunksOverwritten: 763734, BytesOverwritten: 1 << 30}}})
	readOnce, err := DecodeLossContext(traceConfigMessage(&TraceConfig{Buffers: []TraceConfigBuffer{{SizeKB: 64}}}))
	if err != nil || !readOnce.Known || readOnce.WriteIntoFile || len(readOnce.Ring) != 1 || !readOnce.Ring[0] {
		t.Fatalf("context %+v, %v", readOnce, err)
	}
	streaming, _ := DecodeLossContext(traceConfigMessage(&TraceConfig{Buffers: []TraceConfigBuffer{{SizeKB: 64}}, WriteIntoFile: true}))
	discard, _ := DecodeLossContext(traceConfigMessage(&TraceConfig{Buffers: []TraceConfigBuffer{{SizeKB: 64, Discard: true}}}))

	var out bytes.Buffer
	if err := WriteLossTableContext(&out, rows, readOnce); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if strings.Contains(text, "DATA LOSS") || !strings.Contains(text, "no data loss recorded; the ring buffer overwrote its oldest data (763734 chunks, marked ~)") {
		t.Errorf("read-once ring:\n%s", text)
	}
	if !strings.Contains(text, "~  buffer 0  chunks_overwritten             data_loss  763734") {
		t.Errorf("the counter keeps its name, severity and value:\n%s", text)
	}
	for name, c := range map[string]LossContext{"streaming": streaming, "discard": discard, "unknown": {}} {
		if h := LossHeadline(rows, c); !strings.HasPrefix(h, "DATA LOSS: 2 counter(s)") {
			t.Errorf("%s: headline %q", name, h)
		}
	}
	// A real loss beside ring overwrites is still DATA LOSS.
	rows = LossReport(TraceStats{InvalidPackets: 1, BufferStats: []BufferStats{{ChunksOverwritten: 5}}})
	if h := LossHeadline(rows, readOnce); !strings.HasPrefix(h, "DATA LOSS: 1 counter(s)") || !strings.Contains(h, "5 chunks") {
		t.Errorf("mixed: %q", h)
	}
}

// traceConfigMessage returns the TraceConfig message bytes of tc.
func traceConfigMessage(tc *TraceConfig) []byte {
	info, err := DecodePacket(AppendTraceConfig(nil, tc))
	if err != nil {
		panic(err)
	}
	return info.Payload
}
