package tpimport

import (
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/tracefile"
)

func sinkStatsPacket(dropped, reconnects uint64) []byte {
	ts := tracefile.TraceStats{Tracepipe: &tracefile.TracepipeStats{SinkPacketsWritten: 3, SinkPacketsDropped: dropped, SinkReconnects: reconnects}}
	return tracefile.AppendTraceStatsPacket(nil, &ts, 0, 1)
}

// A file whose sink counted lost packets (e.g. the gap of a file sink
// that resumed after a full disk) is named by check, with the count; the
// last TraceStats stands.
func TestSinkPacketsDroppedFinding(t *testing.T) {
	wantCodes(t, check(t, append(prefix(), sinkStatsPacket(0, 0))...))
	r := check(t, append(prefix(), sinkStatsPacket(4, 0), sinkStatsPacket(17, 1))...)
	wantCodes(t, r, CodeSinkPacketsDropped)
	for _, f := range r.Findings {
		if f.Code == CodeSinkPacketsDropped && (f.Count != 17 || !strings.Contains(f.Message, "came back 1 time")) {
			t.Errorf("finding %+v: want 17 packets and the resume", f)
		}
	}
}

// A file with no packet is not clean: trace_processor imports nothing
// from it (check used to call an empty file "clean").
func TestEmptyTraceFinding(t *testing.T) {
	r, err := Check(strings.NewReader(""), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Clean() || len(r.Findings) != 1 || r.Findings[0].Code != CodeEmptyTrace {
		t.Fatalf("findings %+v, want one %s", r.Findings, CodeEmptyTrace)
	}
}
