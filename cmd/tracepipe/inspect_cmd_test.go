package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/tracefile"
)

func TestInspectPerSequence(t *testing.T) {
	pkts := [][]byte{
		producerPacket(2, 0, 100, "a"),
		producerPacket(2, tracefile.LossPresent|tracefile.LossOverwrite, 110, "bb"),
		producerPacket(3, 0, 120, "ccc"),
		producerPacket(2, 0, 140, "dddd"),
		statsPacket(lossyStats(), 150),
	}
	path := writeFile(t, "t.pftrace", traceOf(pkts...))
	stdout, stderr, code := runCLI(t, "inspect", path)
	if code != exitOK || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	seqBytes := map[uint32]int{}
	for _, i := range []int{0, 1, 3} {
		seqBytes[2] += len(pkts[i])
	}
	seqBytes[3] = len(pkts[2])
	// SEQ PACKETS BYTES FIRST LAST DROPPED LOSS_BITS, FIRST and LAST
	// after the trace's first timestamp (100).
	for _, want := range []string{
		fmt.Sprintf(`(?m)^2\s+3\s+%d\s+\+0s\s+\+40ns\s+1\s+PRESENT\|OVERWRITE$`, seqBytes[2]),
		fmt.Sprintf(`(?m)^3\s+1\s+%d\s+\+20ns\s+\+20ns\s+0\s+0$`, seqBytes[3]),
		`(?m)^1\s+1\s+\d+\s+\+50ns\s+\+50ns\s+0\s+0$`, // the service's TraceStats packet
		`(?m)^packets:\s+5$`,
		`(?m)^timestamps:\s+100 \.\. 150 ns \(100ns \.\. 150ns since boot; span 50ns\)$`,
		`(?m)^last trace_stats: DATA LOSS: \d+ counter\(s\) non-zero`,
		`(?m)^for_testing\s+4$`,
		`(?m)^trace_stats\s+1$`,
		`(?m)^packet 0 at offset 0:$`,
		`(?m)^packet 4 at offset \d+:$`,
		`(?m)^trace ` + regexp.QuoteMeta(path) + ` \(\d+ bytes on disk\)$`,
	} {
		if !regexp.MustCompile(want).MatchString(stdout) {
			t.Errorf("output does not match %s:\n%s", want, stdout)
		}
	}

	// --packets limits the packets rendered as text; 0 renders none.
	stdout, _, code = runCLI(t, "inspect", "--packets", "2", path)
	if code != exitOK || !strings.Contains(stdout, "packet 1 at offset") || strings.Contains(stdout, "packet 2 at offset") {
		t.Errorf("--packets 2: exit %d\n%s", code, stdout)
	}
	stdout, _, code = runCLI(t, "inspect", "--packets", "0", path)
	if code != exitOK || strings.Contains(stdout, "at offset") || !strings.Contains(stdout, "sequences:") {
		t.Errorf("--packets 0: exit %d\n%s", code, stdout)
	}
}

func TestInspectTruncated(t *testing.T) {
	data := traceOf(producerPacket(2, 0, 100, "a"), producerPacket(2, 0, 110, "b"), producerPacket(4, 0, 120, "c"))
	path := writeFile(t, "cut.pftrace", data[:len(data)-2])
	stdout, stderr, code := runCLI(t, "inspect", path)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(stderr, "warning") || !strings.Contains(stderr, "truncated") || !strings.Contains(stderr, "2 complete packet(s)") {
		t.Errorf("stderr %q", stderr)
	}
	if !regexp.MustCompile(`(?m)^2\s+2\s`).MatchString(stdout) || regexp.MustCompile(`(?m)^4\s`).MatchString(stdout) {
		t.Errorf("summary of the readable part:\n%s", stdout)
	}
}

func TestInspectErrors(t *testing.T) {
	_, stderr, code := runCLI(t, "inspect", "/nonexistent/trace.pftrace")
	if code != exitError || !strings.Contains(stderr, "/nonexistent/trace.pftrace") {
		t.Errorf("missing file: exit %d, stderr %q", code, stderr)
	}
	bad := append(traceOf(producerPacket(2, 0, 1, "a")), 0x08, 0x01)
	stdout, stderr, code := runCLI(t, "inspect", writeFile(t, "bad.pftrace", bad))
	if code != exitError || !strings.Contains(stderr, "malformed") || !strings.Contains(stdout, "packets:") {
		t.Errorf("malformed: exit %d, stderr %q\n%s", code, stderr, stdout)
	}
}
