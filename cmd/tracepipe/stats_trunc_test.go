package main

import (
	"strings"
	"testing"
)

// A truncated trace without a whole TraceStats packet: one message saying
// both facts, not a warning promising "the stats below" followed by an
// error saying there are none.
func TestStatsTruncatedWithoutTraceStats(t *testing.T) {
	tr := goodTrace()
	cut := writeFile(t, "cut.pftrace", tr[:len(tr)-3])
	stdout, stderr, code := runCLI(t, "stats", cut)
	if code != exitError {
		t.Fatalf("exit %d, want %d\n%s%s", code, exitError, stdout, stderr)
	}
	if strings.Contains(stderr, "stats below") {
		t.Errorf("promises stats it does not print:\n%s", stderr)
	}
	if !strings.Contains(stderr, "truncated") || !strings.Contains(stderr, "no TraceStats packet") {
		t.Errorf("does not say the file is truncated and has no TraceStats:\n%s", stderr)
	}
}
