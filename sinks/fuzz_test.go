package sinks

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/tracepipe/tracepipe/tracefile"
)

var filterSeeds = map[string]string{
	"kind":       `packet.kind == "track_event"`,
	"arith":      `packet.size * 2 > packet.timestamp / (packet.sequence_id - 2)`,
	"typo":       `packet.timestmp > 5`,
	"nested":     `((((packet.size > 1))))`,
	"macro":      `[1, 2, 3].exists(x, x == packet.sequence_id)`,
	"string_ops": `packet.kind.startsWith("track") && size(packet.kind) > 3`,
	"bad_syntax": `packet.kind ==`,
}

// TestWriteFilterFuzzCorpus regenerates testdata/fuzz/FuzzFilter
// (SINKS_WRITE_CORPUS=1).
func TestWriteFilterFuzzCorpus(t *testing.T) {
	if os.Getenv("SINKS_WRITE_CORPUS") == "" {
		t.Log("set SINKS_WRITE_CORPUS=1 to rewrite testdata/fuzz")
		return
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzFilter")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	pkt := mkPacket(2, 1000, tracefile.FieldTrackEvent, 4)
	for name, expr := range filterSeeds {
		content := fmt.Sprintf("go test fuzz v1\nstring(%q)\n[]byte(%q)\n", expr, pkt)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzFilter: filter expressions come from config files and packets from
// producers; neither may panic the compiler or the evaluator.
func FuzzFilter(f *testing.F) {
	f.Add(`packet.size > 3`, []byte{0x40, 0x01})
	f.Fuzz(func(t *testing.T, expr string, packet []byte) {
		if len(expr) > 1024 {
			return
		}
		flt, err := NewFilter(expr)
		if err != nil {
			return
		}
		ok, err := flt.Match(packet)
		if err != nil && !ok {
			t.Fatalf("an evaluation error must keep the packet: %v", err)
		}
	})
}

// FuzzRestoreObserve feeds untrusted packets to the rotation fold and
// builds a preamble: no panic, bounded memory, and every emitted packet
// walks as a TracePacket.
func FuzzRestoreObserve(f *testing.F) {
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		r := newRestoreState()
		for _, p := range [][]byte{a, b, a} {
			r.observe(p)
		}
		if r.bytes > MaxRestoreBytes || r.bytes < 0 {
			t.Fatalf("fold holds %d bytes", r.bytes)
		}
		r.appendPreamble(nil, func(p []byte) {
			if _, err := tracefile.DecodePacket(p); err != nil {
				t.Fatalf("preamble packet does not decode: %v", err)
			}
		})
		_ = r.trailer(nil, SinkStats{})
	})
}
