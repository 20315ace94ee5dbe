package main

import (
	"testing"

	"github.com/tracepipe/tracepipe/tracefile"
)

// `tracepipe stats` shows how many sequence restore packets the service
// wrote (tracepipe's own counter 15), as an info row: a restore recovers
// state, it loses nothing.
func TestStatsShowsSequenceRestores(t *testing.T) {
	st := &tracefile.TraceStats{BufferStats: make([]tracefile.BufferStats, 1),
		Tracepipe: &tracefile.TracepipeStats{SequenceRestores: 4, ProtoVMPatchesOK: 9}}
	path := writeFile(t, "restored.pftrace", traceOf(producerPacket(2, 0, 100, "a"), statsPacket(st, 150)))
	stdout, stderr, code := runCLI(t, "stats", path)
	if code != exitOK || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if !rowRE("service", "sequence_restores", "info", 4).MatchString(stdout) {
		t.Fatalf("no sequence_restores row:\n%s", stdout)
	}
}
