package tpimport

import (
	"bytes"
	"os"
	"slices"
	"testing"

	. "github.com/tracepipe/tracepipe/internal/tracebuild"
	"github.com/tracepipe/tracepipe/protovm"
	"github.com/tracepipe/tracepipe/tracefile"
)

const ms = 1_000_000

// prefix is reference §8's common prefix: a sequence-1 clock snapshot
// {BOOTTIME, MONOTONIC, primary BOOTTIME} and a sequence-2 track
// descriptor for uuid 100.
func prefix() [][]byte {
	return [][]byte{
		Packet(Seq(1), Snapshot(6, C(6, 1000*ms), C(3, 900*ms))),
		Packet(Seq(2), Descriptor(100, "t", false)),
	}
}

func check(t *testing.T, packets ...[]byte) *Report {
	t.Helper()
	r, err := Check(bytes.NewReader(Trace(packets...)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func begin(fields ...Field) []byte {
	return Packet(append([]Field{Seq(2), Ts(1001 * ms), Flags(Needs), Event(SliceBegin, 100, 1)}, fields...)...)
}

func end(fields ...Field) []byte {
	return Packet(append([]Field{Seq(2), Ts(1002 * ms), Flags(Needs), Event(SliceEnd, 100, 0)}, fields...)...)
}

func synthetic(fields ...Field) []byte {
	return Packet(append([]Field{Seq(2), Flags(Cleared), Interned(EventName(1, "foo"))}, fields...)...)
}

func wantCodes(t *testing.T, r *Report, want ...string) {
	t.Helper()
	got := r.Codes()
	if want == nil {
		want = []string{}
	}
	if got == nil {
		got = []string{}
	}
	if !slices.Equal(got, want) {
		var buf bytes.Buffer
		_ = r.WriteText(&buf)
		t.Fatalf("finding codes %q, want %q\n%s", got, want, buf.String())
	}
}

func wantStat(t *testing.T, r *Report, name string, index int, want int64) {
	t.Helper()
	if got := r.StatValue(name, index); got != want {
		t.Errorf("stat %s[%d] = %d, want %d", name, index, got, want)
	}
}

// Reference §8, cases t1–t6.
func TestSequenceStateCases(t *testing.T) {
	t.Run("t1 no synthetic", func(t *testing.T) {
		r := check(t, append(prefix(), begin(), end())...)
		wantCodes(t, r, "packet_skipped_seq_needs_incremental_state_invalid")
		wantStat(t, r, "packet_skipped_seq_needs_incremental_state_invalid", -1, 2)
		if s := r.Sequence(2); s.NeedsSkipped != 2 || s.Imported != 1 {
			t.Errorf("seq 2: %+v", s)
		}
	})
	t.Run("t2 synthetic", func(t *testing.T) {
		r := check(t, append(prefix(), synthetic(), begin(), end())...)
		wantCodes(t, r)
	})
	t.Run("t3 loss on survivor", func(t *testing.T) {
		r := check(t, append(prefix(), synthetic(), begin(Loss(65)), end())...)
		wantStat(t, r, "packet_skipped_seq_needs_incremental_state_invalid", -1, 2)
		wantCodes(t, r, "packet_skipped_seq_needs_incremental_state_invalid")
	})
	t.Run("t4 synthetic carries loss", func(t *testing.T) {
		r := check(t, append(prefix(), synthetic(Loss(65)), begin(), end())...)
		wantCodes(t, r)
		if s := r.Sequence(2); s.PacketLoss != 1 {
			// The descriptor packet came first on sequence 2, so the loss
			// on the synthetic packet is counted (not the first packet).
			t.Errorf("previous_packet_dropped_count %d, want 1", s.PacketLoss)
		}
	})
	t.Run("t5 defaults then clear", func(t *testing.T) {
		defaults := Sub(tracefile.FieldTracePacketDefaults, Sub(11, Varint(11, 100)))
		r := check(t, append(prefix(),
			Packet(Seq(2), Flags(Cleared), defaults, Interned(EventName(1, "foo"))),
			Packet(Seq(2), Ts(1001*ms), Flags(Needs), Event(Instant, 0, 1)),
			Packet(Seq(2), Flags(Cleared), Interned(EventName(1, "foo"))),
			Packet(Seq(2), Ts(1002*ms), Flags(Needs), Event(Instant, 0, 1)),
		)...)
		// Both instants import; the second lands on the Default Track
		// (uuid 0), which needs no descriptor.
		wantCodes(t, r)
		if s := r.Sequence(2); s.Imported != 5 {
			t.Errorf("seq 2 %+v", s)
		}
	})
	t.Run("defaults clock and sequence-scoped clocks", func(t *testing.T) {
		defaults := Sub(tracefile.FieldTracePacketDefaults, Varint(58, 64))
		ok := check(t, append(prefix(),
			Packet(Seq(2), defaults, Snapshot(0, C(64, 5), C(6, 1000*ms))),
			Packet(Seq(2), Ts(6), Event(Instant, 100, 0, String(23, "x"))))...)
		wantCodes(t, ok)
		// Clock 64 of sequence 2 means nothing on sequence 3.
		bad := check(t, append(prefix(),
			Packet(Seq(2), Snapshot(0, C(64, 5), C(6, 1000*ms))),
			Packet(Seq(3), Ts(6), ClockID(64), Event(Instant, 100, 0, String(23, "x"))))...)
		wantStat(t, bad, "clock_sync_failure_unknown_source_clock", -1, 1)
	})
	t.Run("machines keep their own sequence state", func(t *testing.T) {
		r := check(t, append(prefix(),
			synthetic(),
			Packet(Seq(2), MachineID(7), Ts(1001*ms), Flags(Needs), Event(Instant, 100, 1)),
			begin(), end())...)
		wantStat(t, r, "packet_skipped_seq_needs_incremental_state_invalid", -1, 1)
	})
	t.Run("t6 mid-sequence loss", func(t *testing.T) {
		r := check(t, append(prefix(),
			synthetic(),
			Packet(Seq(2), Ts(1001*ms), Flags(Needs), Event(Instant, 100, 1)), // ok
			Packet(Seq(2), Ts(1001*ms), Flags(Needs), Loss(65), Event(Instant, 100, 1)),
			Packet(Seq(2), Interned(EventName(2, "bar"))),
			Packet(Seq(2), Ts(1001*ms), Flags(Needs), Event(Instant, 100, 2)),
			Packet(Seq(2), Flags(Cleared|Needs), Loss(65), Interned(EventName(3, "baz"))),
			Packet(Seq(2), Ts(1001*ms), Flags(Needs), Event(Instant, 100, 1)), // old iid: NULL name
			Packet(Seq(2), Ts(1001*ms), Event(Instant, 100, 3)),
			Packet(Seq(1), TraceStats(&tracefile.TraceStats{WriterStats: []tracefile.WriterStats{{SequenceID: 2}}})),
		)...)
		wantStat(t, r, "packet_skipped_seq_needs_incremental_state_invalid", -1, 2)
		wantStat(t, r, "interned_data_skipped_incremental_state_invalid", -1, 1)
		wantStat(t, r, "traced_buf_sequence_packet_loss", 0, 2)
		wantStat(t, r, "traced_buf_data_loss_overwrite", 0, 2)
		wantStat(t, r, "interned_data_tokenizer_errors", -1, 1)
		if s := r.Sequence(2); s.Unresolved["event_names"] != 1 {
			t.Errorf("unresolved %v", s.Unresolved)
		}
		wantCodes(t, r, "interned_data_skipped_incremental_state_invalid", "packet_skipped_seq_needs_incremental_state_invalid",
			"traced_buf_data_loss_overwrite", "traced_buf_sequence_packet_loss", CodeUnresolvedIID)
	})
}

// Reference §5/§8 ProtoVM cases, run on the real VM with the project's
// interned_names.yaml program.
func TestProtoVMCases(t *testing.T) {
	src, err := os.ReadFile("../configs/protovm/interned_names.yaml")
	if err != nil {
		t.Fatal(err)
	}
	prog, err := protovm.Compile(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	cleared := Packet(Flags(Cleared))
	withVM := func(state []byte, rest ...[]byte) []byte {
		p := append(prefix(), Packet(Seq(1), Provenance([2]uint32{2, 7})), Packet(Seq(1), ProtoVMs(prog, state, 64, 7)))
		return Trace(append(p, rest...)...)
	}
	run := func(t *testing.T, trace []byte) *Report {
		r, err := Check(bytes.NewReader(trace), Options{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	sdk := Packet(Seq(2), Ts(1001*ms), Flags(Cleared|Needs), Interned(EventName(1, "foo")), Event(SliceBegin, 100, 1))
	t.Run("v4 split packets, state flags 1", func(t *testing.T) {
		r := run(t, withVM(cleared, Packet(Seq(2), Flags(Cleared), Interned(EventName(1, "foo"))), begin(), end()))
		wantCodes(t, r)
		if s := r.Sequence(2); s.Replaced != 1 || s.Imported != 3 || s.Packets != 4 {
			t.Errorf("seq 2 %+v", s)
		}
	})
	t.Run("v1 SDK style, empty state", func(t *testing.T) {
		r := run(t, withVM(nil, sdk, end()))
		wantStat(t, r, "packet_skipped_seq_needs_incremental_state_invalid", -1, 1)
		wantStat(t, r, "interned_data_skipped_incremental_state_invalid", -1, 1)
		wantCodes(t, r, "interned_data_skipped_incremental_state_invalid", "packet_skipped_seq_needs_incremental_state_invalid", CodeReplacedPayload)
	})
	t.Run("v2 SDK style, state flags 1", func(t *testing.T) {
		r := run(t, withVM(cleared, sdk, end()))
		// No stat, but the slice begin was replaced away: 0 slices.
		wantCodes(t, r, CodeReplacedPayload)
	})
	t.Run("v5 state without patch packet", func(t *testing.T) {
		state := Packet(Flags(Cleared), Interned(EventName(1, "foo")))
		r := run(t, withVM(state, begin(), end()))
		wantStat(t, r, "packet_skipped_seq_needs_incremental_state_invalid", -1, 2)
		wantCodes(t, r, "packet_skipped_seq_needs_incremental_state_invalid")
	})
	t.Run("v6 synthetic patch", func(t *testing.T) {
		state := Packet(Flags(Cleared), Interned(EventName(1, "foo")))
		r := run(t, withVM(state, Packet(Seq(2), Interned(EventName(2, "zzz"))), begin(), end()))
		wantCodes(t, r)
		if r.ProtoVM.Ok != 1 || r.ProtoVM.Error != 2 {
			t.Errorf("patches %+v", r.ProtoVM)
		}
	})
	t.Run("v8 protovms before provenance", func(t *testing.T) {
		p := append(prefix(), Packet(Seq(1), ProtoVMs(prog, nil, 64, 7)), Packet(Seq(1), Provenance([2]uint32{2, 7})), synthetic(), begin(), end())
		r := run(t, Trace(p...))
		wantStat(t, r, "protovm_registration_error", -1, 1)
		wantCodes(t, r, "protovm_registration_error")
	})
	t.Run("w4 abort", func(t *testing.T) {
		bad := Packet(Seq(2), Interned(Sub(2, String(2, "no iid"))))
		r := run(t, withVM(cleared, synthetic(), bad, begin(), end()))
		wantStat(t, r, "protovm_abort", -1, 1)
		wantCodes(t, r, "protovm_abort")
	})
}

// Reference §6: the config and version rules, writer_stats (w1–w3).
func TestConfigStats(t *testing.T) {
	noFlush := Config{WriteIntoFile: true, FileWritePeriodMs: 2500, FillPolicies: []uint64{1}}
	for _, tc := range []struct {
		version string
		cfg     Config
		want    int64
	}{
		{"", noFlush, 1},
		{"tracepipe v1.0", noFlush, 1},
		{"Perfetto v53.1 (x)", noFlush, 1},
		{"Perfetto v54", noFlush, 1},
		{"Perfetto v54.0-abc", noFlush, 0},
		{"Perfetto v55-dev", noFlush, 0},
		{"tracepipe v1.0", Config{WriteIntoFile: true, FileWritePeriodMs: 2500, FlushPeriodMs: 1000, FillPolicies: []uint64{1}}, 0},
		{"", Config{FillPolicies: []uint64{1}}, 0},
	} {
		p := append(prefix(), Packet(Seq(1), TraceConfig(tc.cfg)))
		if tc.version != "" {
			p = append(p, Packet(Seq(1), SystemInfo(tc.version)))
		}
		r := check(t, p...)
		if got := r.StatValue("config_write_into_file_no_flush", -1); got != tc.want {
			t.Errorf("version %q cfg %+v: no_flush %d, want %d", tc.version, tc.cfg, got, tc.want)
		}
	}
	t.Run("discard and long trace mode", func(t *testing.T) {
		r := check(t, append(prefix(),
			Packet(Seq(1), TraceConfig(Config{WriteIntoFile: true, FileWritePeriodMs: 2500, FlushPeriodMs: 1000, FillPolicies: []uint64{1, 2}})),
			Packet(Seq(1), TraceStats(&tracefile.TraceStats{BufferStats: []tracefile.BufferStats{{BytesOverwritten: 4096}, {}}})),
		)...)
		wantStat(t, r, "config_write_into_file_discard", 1, 1)
		wantStat(t, r, "config_write_into_file_discard", 0, 0)
		wantStat(t, r, "long_trace_mode_bytes_overwritten", 0, 4096)
		wantCodes(t, r, "config_write_into_file_discard", "long_trace_mode_bytes_overwritten")
	})
	losses := func() [][]byte {
		return append(prefix(), synthetic(), begin(Loss(65)), Packet(Seq(2), Flags(Cleared), Loss(257)))
	}
	ws := Packet(Seq(1), TraceStats(&tracefile.TraceStats{WriterStats: []tracefile.WriterStats{{SequenceID: 2}}}))
	t.Run("w1 writer_stats", func(t *testing.T) {
		r := check(t, append(losses(), ws)...)
		wantStat(t, r, "traced_buf_sequence_packet_loss", 0, 2)
		wantStat(t, r, "traced_buf_data_loss_overwrite", 0, 1)
		wantStat(t, r, "traced_buf_data_loss_smb_full", 0, 1)
	})
	t.Run("w2 no writer_stats", func(t *testing.T) {
		r := check(t, losses()...)
		wantStat(t, r, "traced_buf_sequence_packet_loss", 0, 0)
		wantCodes(t, r, "packet_skipped_seq_needs_incremental_state_invalid")
	})
	t.Run("w3 trace_stats first", func(t *testing.T) {
		p := append([][]byte{ws}, losses()...)
		r := check(t, p...)
		wantStat(t, r, "traced_buf_sequence_packet_loss", 0, 0)
	})
}

// Reference §3 and §4: counters, tracks and clocks.
func TestTracksAndClocks(t *testing.T) {
	counter := Packet(Seq(2), Ts(1001*ms), Event(Counter, 200, 0, CounterValue(5)))
	t.Run("u3 counter descriptor after events", func(t *testing.T) {
		r := check(t, append(prefix(), counter, counter, Packet(Seq(2), Descriptor(200, "c", true)))...)
		wantStat(t, r, "track_event_counter_invalid_track_uuid", -1, 2)
		wantCodes(t, r, "track_event_counter_invalid_track_uuid")
	})
	t.Run("counter descriptor first", func(t *testing.T) {
		r := check(t, append(prefix(), Packet(Seq(2), Descriptor(200, "c", true)), counter)...)
		wantCodes(t, r)
	})
	t.Run("u1 slice on undescribed track", func(t *testing.T) {
		r := check(t, append(prefix(), Packet(Seq(2), Ts(1001*ms), Event(SliceBegin, 300, 0, String(23, "x"))))...)
		wantCodes(t, r, CodeTrackNoDescriptor)
	})
	t.Run("descriptor after its slices", func(t *testing.T) {
		r := check(t, append(prefix(), Packet(Seq(2), Ts(1001*ms), Event(SliceBegin, 300, 0, String(23, "x"))),
			Packet(Seq(2), Descriptor(300, "late", false)))...)
		wantCodes(t, r)
	})
	t.Run("c2 BOOTTIME without snapshot", func(t *testing.T) {
		r := check(t, Packet(Seq(2), Ts(5), ClockID(6), Event(Instant, 0, 0, String(23, "x"))))
		wantCodes(t, r, CodeNoClockSnapshot)
	})
	t.Run("c3 MONOTONIC without snapshot", func(t *testing.T) {
		r := check(t, Packet(Seq(2), Ts(5), ClockID(3), Event(Instant, 0, 0, String(23, "x"))))
		wantStat(t, r, "clock_sync_failure_unknown_source_clock", -1, 1)
		wantStat(t, r, "clock_sync_failure_undeferrable_packet_loss", -1, 1)
		wantCodes(t, r, "clock_sync_failure_undeferrable_packet_loss", "clock_sync_failure_unknown_source_clock", CodeNoClockSnapshot)
	})
	t.Run("c4 REALTIME absent from the snapshot", func(t *testing.T) {
		r := check(t, append(prefix(), Packet(Seq(2), Ts(5), ClockID(1), Event(Instant, 100, 0, String(23, "x"))))...)
		wantStat(t, r, "clock_sync_failure_unknown_source_clock", -1, 1)
	})
	t.Run("MONOTONIC in the snapshot", func(t *testing.T) {
		r := check(t, append(prefix(), Packet(Seq(2), Ts(901*ms), ClockID(3), Event(Instant, 100, 0, String(23, "x"))))...)
		wantCodes(t, r)
	})
	t.Run("timestamps far from the session", func(t *testing.T) {
		// two_buffers.yaml's report: events at 1–16 ms of boot time in a
		// session whose clocks say 6,345 s.
		r := check(t, Packet(Seq(1), Snapshot(6, C(6, 6345_000*ms), C(3, 6300_000*ms))),
			Packet(Seq(2), Descriptor(100, "t", false)),
			Packet(Seq(3), Ts(2*ms), Event(Instant, 100, 0, String(23, "x"))),
			Packet(Seq(3), Ts(16*ms), Event(Instant, 100, 0, String(23, "x"))),
			Packet(Seq(2), Ts(6346_000*ms), Event(Instant, 100, 0, String(23, "x"))),
			Packet(Seq(1), Ts(6350_000*ms), ClockID(6), TraceStats(&tracefile.TraceStats{})))
		wantCodes(t, r, CodeTimestampsOutside)
		if f := r.Findings[0]; f.Sequence != 3 || f.Count != 2 {
			t.Errorf("finding %+v", f)
		}
	})
	t.Run("NEEDS on sequence 0 is fatal", func(t *testing.T) {
		r := check(t, append(prefix(), Packet(Flags(Needs), Ts(1001*ms), Event(Instant, 100, 0)))...)
		if r.Fatal == "" {
			t.Fatal("no fatal")
		}
	})
}

func TestStrictDecoding(t *testing.T) {
	payload := make([]byte, 16) // the example plugin's shape: LE index, then bytes
	for i := 4; i < len(payload); i++ {
		payload[i] = byte(i)
	}
	r := check(t, append(prefix(), Packet(Seq(2), Ts(1001*ms), ForTesting(payload)))...)
	wantCodes(t, r, CodeStrictDecode)
	if r.Findings[0].Offset <= 0 {
		t.Errorf("finding %+v has no offset", r.Findings[0])
	}
	// A valid TestEvent {str "x", seq_value 3} passes.
	good := Message(String(1, "x"), Varint(2, 3))
	wantCodes(t, check(t, append(prefix(), Packet(Seq(2), Ts(1001*ms), ForTesting(good)))...))
	// A ProtoVM patch nested in TestEvent is decoded as a message too.
	badNested := Message(Bytes(6, []byte{0x00, 0x01}))
	wantCodes(t, check(t, append(prefix(), Packet(Seq(2), ForTesting(badNested)))...), CodeStrictDecode)
}

func TestTruncated(t *testing.T) {
	full := Trace(append(prefix(), synthetic(), begin(), end())...)
	r, err := Check(bytes.NewReader(full[:len(full)-3]), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Truncated || r.Packets != 4 {
		t.Fatalf("truncated %v packets %d", r.Truncated, r.Packets)
	}
	wantCodes(t, r, CodeTruncated)
}

func TestServiceMajorVersion(t *testing.T) {
	for v, want := range map[string]int64{"Perfetto v54.0-abc": 54, "Perfetto v60-x": 60, "Perfetto v54": -1, "perfetto v60.1": -1, "Perfetto v.1": -1, "Perfetto v99999999999.1": -1} {
		got, ok := ServiceMajorVersion(v)
		if (want < 0) == ok || ok && int64(got) != want {
			t.Errorf("%q: %d %v, want %d", v, got, ok, want)
		}
	}
}
