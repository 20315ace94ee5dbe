package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/tracefile"
)

// out builds an output from (index, flagged) pairs of one sequence.
func out(name string, key seqKey, idx []uint64, flagged map[uint64]bool) *output {
	o := &output{name: name, seqs: map[seqKey]*seqData{}}
	s := &seqData{}
	for _, i := range idx {
		if err := s.add(i, flagged[i]); err != nil {
			panic(err)
		}
	}
	o.seqs[key] = s
	return o
}

var synth2 = seqKey{2, "synthetic"}

// A gap the service flagged (previous_packet_dropped on the packet after
// it) is counted; an unflagged gap and a duplicate are unexplained.
func TestReconcileReferenceGaps(t *testing.T) {
	cases := []struct {
		name                                string
		idx                                 []uint64
		flagged                             map[uint64]bool
		emitted, delivered, counted, unexpl uint64
	}{
		{"complete", []uint64{0, 1, 2, 3}, nil, 4, 4, 0, 0},
		{"flagged gap", []uint64{0, 1, 4, 5}, map[uint64]bool{4: true}, 6, 4, 2, 0},
		{"unflagged gap", []uint64{0, 1, 4, 5}, nil, 6, 4, 0, 2},
		{"lost head, flagged", []uint64{3, 4}, map[uint64]bool{3: true}, 5, 2, 3, 0},
		{"duplicate", []uint64{0, 1, 1, 2}, nil, 3, 3, 0, 1},
	}
	for _, c := range cases {
		rows := reconcileReference(out("reference", synth2, c.idx, c.flagged), 0)
		e, d, k, u := totals(rows)
		if e != c.emitted || d != c.delivered || k != c.counted || u != c.unexpl {
			t.Errorf("%s: emitted %d delivered %d counted %d unexplained %d; want %d %d %d %d",
				c.name, e, d, k, u, c.emitted, c.delivered, c.counted, c.unexpl)
		}
	}
}

// What the Perfetto double wrote beyond the last packet found is
// unexplained: nothing in the trace flags a lost tail.
func TestReconcileReferencePerfettoTail(t *testing.T) {
	key := seqKey{8, "perfetto"}
	rows := reconcileReference(out("reference", key, []uint64{0, 1, 2}, nil), 5)
	e, d, _, u := totals(rows)
	if e != 5 || d != 3 || u != 2 {
		t.Fatalf("emitted %d delivered %d unexplained %d; want 5 3 2", e, d, u)
	}
}

// A copy's missing packets are counted up to its own drop counter; the
// rest, and packets the reference lacks, are unexplained.
func TestReconcileCopy(t *testing.T) {
	ref := out("reference", synth2, []uint64{0, 1, 2, 3, 4, 5}, nil)
	for _, c := range []struct {
		name            string
		idx             []uint64
		dropped         uint64
		counted, unexpl uint64
	}{
		{"complete", []uint64{0, 1, 2, 3, 4, 5}, 0, 0, 0},
		{"drops counted", []uint64{0, 1, 5}, 3, 3, 0},
		{"drops beyond the counter", []uint64{0, 1, 5}, 1, 1, 2},
		{"extra packet", []uint64{0, 1, 2, 3, 4, 5, 6}, 0, 0, 1},
		{"duplicate", []uint64{0, 1, 2, 2, 3, 4, 5}, 0, 0, 1},
	} {
		cp := out("copy", synth2, c.idx, nil)
		cp.stats.Tracepipe = &tracefile.TracepipeStats{SinkPacketsDropped: c.dropped}
		rows, _ := reconcileCopy(ref, cp)
		_, _, k, u := totals(rows)
		if k != c.counted || u != c.unexpl {
			t.Errorf("%s: counted %d unexplained %d; want %d %d", c.name, k, u, c.counted, c.unexpl)
		}
	}
	// A copy filtered to one kind is not held to the other kinds.
	cp := out("small", seqKey{8, "perfetto"}, nil, nil)
	cp.only = "perfetto"
	if rows, _ := reconcileCopy(ref, cp); len(rows) != 1 || rows[0].unexplain != 0 {
		t.Fatalf("filtered copy: rows %+v", rows)
	}
}

// perfettoCounter reads back what the double writes, and nothing else.
func TestPerfettoCounter(t *testing.T) {
	ev := protowire.AppendTag(nil, 1, protowire.BytesType)
	ev = protowire.AppendString(ev, perfettoMarker)
	ev = protowire.AppendTag(ev, 3, protowire.VarintType)
	ev = protowire.AppendVarint(ev, 42)
	pkt := protowire.AppendTag(nil, 8, protowire.VarintType)
	pkt = protowire.AppendVarint(pkt, 43)
	pkt = protowire.AppendTag(pkt, 900, protowire.BytesType)
	pkt = protowire.AppendBytes(pkt, ev)
	if v, ok := perfettoCounter(pkt); !ok || v != 42 {
		t.Fatalf("got %d %v, want 42 true", v, ok)
	}
	other := protowire.AppendTag(nil, 900, protowire.BytesType)
	other = protowire.AppendBytes(other, protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), 7))
	if _, ok := perfettoCounter(other); ok {
		t.Fatal("a TestEvent without the marker was taken for the double's")
	}
	if _, ok := perfettoCounter([]byte{0xff}); ok {
		t.Fatal("a malformed packet was accepted")
	}
}

// The reference's rotated files are found under the names the file sink
// gives them (the index before the extension), in rotation order, and a
// snapshot beside them is not one of them.
func TestTraceFilesRotationOrder(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"ref.pftrace", "ref.1.pftrace", "ref.2.pftrace", "ref.snap-1-manual.pftrace"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := traceFiles(filepath.Join(dir, "ref.pftrace"))
	var names []string
	for _, p := range got {
		names = append(names, filepath.Base(p))
	}
	want := "ref.pftrace ref.1.pftrace ref.2.pftrace"
	if strings.Join(names, " ") != want {
		t.Errorf("traceFiles = %v, want %s", names, want)
	}
}

// -fail-on-counters fails on the reference's own data-loss counters, not on
// plugin deaths (an injected fault) or another sink's recorded loss.
func TestStrictLoss(t *testing.T) {
	for _, tc := range []struct {
		row  tracefile.LossRow
		want bool
	}{
		{tracefile.LossRow{Name: "chunks_discarded", Index: 1, Severity: tracefile.SeverityDataLoss, Value: 1}, true},
		{tracefile.LossRow{Name: "sink_packets_dropped", Index: -1, Severity: tracefile.SeverityDataLoss, Value: 3}, true},
		{tracefile.LossRow{Name: "chunks_discarded", Index: 1, Severity: tracefile.SeverityDataLoss, Value: 0}, false},
		{tracefile.LossRow{Name: "data_sources[1] (p).died", Index: -1, Severity: tracefile.SeverityDataLoss, Value: 1}, false},
		{tracefile.LossRow{Name: "sinks[1] (/t/small.pftrace).packets_dropped", Index: -1, Severity: tracefile.SeverityDataLoss, Value: 59259}, false},
		{tracefile.LossRow{Name: "sinks[1] (/t/small.pftrace).failed", Index: -1, Severity: tracefile.SeverityDataLoss, Value: 1}, false},
	} {
		if got := strictLoss(tc.row); got != tc.want {
			t.Errorf("strictLoss(%+v) = %v, want %v", tc.row, got, tc.want)
		}
	}
}
