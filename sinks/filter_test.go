package sinks

import (
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/tracefile"
)

func TestFilterCompileErrors(t *testing.T) {
	cases := []struct{ expr, want string }{
		{`packet.timestmp > 5`, "1:7"},                      // unknown field, with position
		{`packet.kind > 3`, "found no matching overload"},   // type error
		{`packet.size`, "result type is int, want bool"},    // not a predicate
		{`packet.kind == "track_event" &&`, "Syntax error"}, // parse error
		{`pkt.size > 1`, "undeclared reference to 'pkt'"},
	}
	for _, c := range cases {
		_, err := NewFilter(c.expr)
		if err == nil {
			t.Errorf("%q compiled", c.expr)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.expr) {
			t.Errorf("%q: error %q lacks %q or the expression", c.expr, err, c.want)
		}
	}
}

func TestFilterOnEncodedPackets(t *testing.T) {
	te := mkPacket(2, 1000, tracefile.FieldTrackEvent, 5)
	ss := mkPacket(3, 2000, tracefile.FieldSysStats, 5)
	lost := tracefile.AppendTrusted(tracefile.AppendTimestamp(nil, 3000), tracefile.Trusted{UID: 7, SequenceID: 4, PreviousPacketDropped: 65})
	first := tracefile.AppendFirstPacketOnSequence(append([]byte(nil), te...))
	ts := tracefile.TraceStats{BufferStats: []tracefile.BufferStats{{ChunksOverwritten: 1}}}
	stats := tracefile.AppendTraceStatsPacket(nil, &ts, 0, 5)
	cases := []struct {
		expr string
		want []bool // te, ss, lost, first, stats
	}{
		{`packet.kind == "track_event"`, []bool{true, false, false, true, true}},
		{`packet.kind == "sys_stats" || packet.timestamp >= 3000`, []bool{false, true, true, false, true}},
		{`packet.sequence_id == 2 && packet.trusted_pid == 42 && packet.trusted_uid == 1000`, []bool{true, false, false, true, true}},
		{`packet.previous_packet_dropped != 0`, []bool{false, false, true, false, true}},
		{`packet.first_packet_on_sequence`, []bool{false, false, false, true, true}},
		{`packet.size < 12`, []bool{false, false, true, false, true}},
		{`packet.kind == ""`, []bool{false, false, true, false, true}},
		{`false`, []bool{false, false, false, false, true}}, // trace_stats always pass
	}
	pkts := [][]byte{te, ss, lost, first, stats}
	for _, c := range cases {
		f, err := NewFilter(c.expr)
		if err != nil {
			t.Fatalf("%q: %v", c.expr, err)
		}
		for i, p := range pkts {
			got, err := f.Match(p)
			if err != nil {
				t.Fatalf("%q packet %d: %v", c.expr, i, err)
			}
			if got != c.want[i] {
				t.Errorf("%q packet %d (size %d): got %v want %v", c.expr, i, len(p), got, c.want[i])
			}
		}
	}
}

func TestFilteredSinkCounts(t *testing.T) {
	f, err := NewFilter(`packet.kind == "track_event"`)
	if err != nil {
		t.Fatal(err)
	}
	inner := &memSink{}
	s := NewLane(inner, LaneConfig{Filter: f, FilterDrop: false, Block: true})
	te := mkPacket(2, 1, tracefile.FieldTrackEvent, 3)
	ss := mkPacket(2, 2, tracefile.FieldSysStats, 30)
	bad := []byte{0x5a, 0x05} // malformed: kept, counted as a filter error
	if err := s.Write(bg, [][]byte{te, ss, ss, bad, te}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(bg); err != nil {
		t.Fatal(err)
	}
	samePackets(t, inner.packets(), [][]byte{te, bad, te})
	st := s.Stats()
	if st.PacketsFiltered != 2 || st.BytesFiltered != 2*uint64(len(ss)) || st.FilterErrors != 1 || st.PacketsWritten != 3 {
		t.Fatalf("stats %+v", st)
	}
	if st.PacketsWritten+st.PacketsDropped() != 5 {
		t.Fatalf("accounting: %+v", st)
	}
	if err := s.Write(bg, [][]byte{ss}); err != nil {
		t.Fatalf("all-filtered batch: %v", err)
	}
	if err := s.Flush(bg); err != nil || inner.flushes != 2 || len(inner.packets()) != 3 {
		t.Fatal("flush not forwarded")
	}
	if err := s.Close(bg); err != nil || !inner.closed {
		t.Fatal("close not forwarded")
	}
}

// Service packets and packets that carry only incremental state (restore
// packets) pass any filter without being evaluated.
func TestFilterPassesServiceAndStatePackets(t *testing.T) {
	f, err := NewFilter(`false`)
	if err != nil {
		t.Fatal(err)
	}
	restore := tracefile.AppendRestorePacket(nil, appendLenField(nil, tracefile.FieldInternedData, []byte{0x12, 0x00}), tracefile.Trusted{SequenceID: 5})
	for name, p := range map[string][]byte{
		"service clock snapshot": mkPacket(1, 1, tracefile.FieldClockSnapshot, 4),
		"restore packet":         restore,
		"trace stats":            mkPacket(7, 1, tracefile.FieldTraceStats, 0),
	} {
		if ok, err := f.Match(p); !ok || err != nil {
			t.Errorf("%s: kept %v, err %v", name, ok, err)
		}
	}
	if ok, _ := f.Match(mkPacket(2, 1, tracefile.FieldTrackEvent, 4)); ok {
		t.Error("a track_event passed `false`")
	}
}

// A filter that lowers to Go (most do) costs no allocation per packet: a
// lane runs it on every packet its sink sees. The compiler is reached
// through a function value, and a pointer to the decoded packet given to
// one escapes; the packet goes by value (FilterCompiler).
func TestFilterMatchAllocatesNothing(t *testing.T) {
	f, err := NewFilter(`packet.kind == "track_event" && packet.sequence_id != 3`)
	if err != nil {
		t.Fatal(err)
	}
	pkt := mkPacket(2, 1, tracefile.FieldTrackEvent, 100)
	if n := testing.AllocsPerRun(100, func() {
		if ok, err := f.Match(pkt); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}); n != 0 {
		t.Errorf("Match allocates %.0f times per packet, want 0", n)
	}
}

// A program that handed no compiler over (tracepiped) refuses every
// filter, saying why, instead of passing or dropping packets unfiltered.
func TestNewFilterWithoutCompiler(t *testing.T) {
	saved := filterCompiler.Load()
	filterCompiler.Store(nil)
	defer filterCompiler.Store(saved)
	f, err := NewFilter(`packet.size > 1`)
	if f != nil || err == nil || !strings.Contains(err.Error(), "takes no filters") || !strings.Contains(err.Error(), "packet.size > 1") {
		t.Fatalf("NewFilter without a compiler: %v, %v; want an error quoting the expression", f, err)
	}
}
