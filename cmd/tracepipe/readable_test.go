package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/pipeline"
	"github.com/tracepipe/tracepipe/tracefile"
)

// ringTrace is a ring-buffer trace as a session writes it: the service's
// clock snapshot and trace_config first, producer packets, and a final
// TraceStats whose ring overwrote 763734 chunks.
func ringTrace(writeIntoFile bool) []byte {
	svc := func(p []byte) []byte { return append(tracefile.AppendServiceHeader(nil, 0), p...) }
	clock := svc(tracefile.AppendClockSnapshot(nil, []tracefile.Clock{{ID: tracefile.ClockBoottime, Timestamp: 90}}, tracefile.ClockBoottime))
	tc := &tracefile.TraceConfig{Buffers: []tracefile.TraceConfigBuffer{{SizeKB: 1024}}, WriteIntoFile: writeIntoFile, FileWritePeriodMs: 1000}
	cfg := svc(tracefile.AppendTraceConfig(nil, tc))
	ts := &tracefile.TraceStats{BufferStats: []tracefile.BufferStats{{BufferSize: 1 << 20, ChunksOverwritten: 763734, BytesOverwritten: 763734 * 4096}}}
	return traceOf(clock, cfg,
		producerPacket(2, 0, 100, "a"),
		producerPacket(2, 0, 110, "b"),
		statsPacket(ts, 150))
}

// On a ring buffer read once, `stats` said "DATA LOSS" where `check` says
// clean: the overwrites are the ring keeping its newest data. The counters
// stay (name, severity, value); the headline and the marks change, and
// --fail-on-loss passes. In a streaming session they are a loss.
func TestStatsRingOverwritesAreNotDataLoss(t *testing.T) {
	path := writeFile(t, "ring.pftrace", ringTrace(false))
	stdout, stderr, code := runCLI(t, "stats", "--fail-on-loss", path)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q\n%s", code, stderr, stdout)
	}
	if strings.Contains(stdout, "DATA LOSS") || !strings.Contains(stdout, "no data loss recorded; the ring buffer overwrote its oldest data (763734 chunks") {
		t.Errorf("headline:\n%s", stdout)
	}
	if !regexp.MustCompile(`(?m)^~\s+buffer 0\s+chunks_overwritten\s+data_loss\s+763734$`).MatchString(stdout) {
		t.Errorf("the counter row lost its name, severity or value:\n%s", stdout)
	}
	stdout, _, _ = runCLI(t, "stats", "--json", path)
	if !strings.Contains(stdout, `"counter":"chunks_overwritten","severity":"data_loss","value":763734,"lost":true,"ring_overwrite":true`) {
		t.Errorf("json:\n%s", stdout)
	}

	path = writeFile(t, "stream.pftrace", ringTrace(true))
	stdout, _, code = runCLI(t, "stats", "--fail-on-loss", path)
	if code != exitDataLoss || !strings.Contains(stdout, "DATA LOSS: 2 counter(s) non-zero (marked !)") {
		t.Errorf("streaming: exit %d\n%s", code, stdout)
	}
}

// inspect names the nested fields, leaves the service packets out with
// --skip-service, and sums the last TraceStats in one line unless --stats.
func TestInspectReadable(t *testing.T) {
	path := writeFile(t, "ring.pftrace", ringTrace(false))
	stdout, _, code := runCLI(t, "inspect", path)
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{
		"packet 0 at offset 0:\n", "  clocks {\n    clock_id: BOOTTIME (6)\n",
		"last trace_stats: no data loss recorded; the ring buffer overwrote",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("inspect lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "SCOPE") || strings.Contains(stdout, "clock_snapshot {\n  1 {") {
		t.Errorf("inspect repeats the stats table or numbers nested fields:\n%s", stdout)
	}
	stdout, _, _ = runCLI(t, "inspect", "--skip-service", "-n", "1", path)
	if !strings.Contains(stdout, "(2 service packet(s) left out of the packets below)") ||
		!strings.Contains(stdout, "packet 2 at offset") || strings.Contains(stdout, "clock_snapshot {") {
		t.Errorf("--skip-service:\n%s", stdout)
	}
	stdout, _, _ = runCLI(t, "inspect", "--stats", "-n", "0", path)
	if !regexp.MustCompile(`(?m)^~\s+buffer 0\s+chunks_overwritten`).MatchString(stdout) {
		t.Errorf("--stats:\n%s", stdout)
	}
}

// run's status line shows a read-once ring's overwrites apart from losses,
// as `sessions` does.
func TestStatusLineRingOverwrites(t *testing.T) {
	line := statusLine(pipeline.Status{Losses: 763734 + 3, RingOverwrites: 763734})
	if !strings.Contains(line, "losses 3  ring overwrote 763734 chunks") {
		t.Errorf("status line %q", line)
	}
	if line = statusLine(pipeline.Status{Losses: 5}); !strings.Contains(line, "losses 5") || strings.Contains(line, "ring") {
		t.Errorf("status line %q", line)
	}
}

// run's summary: a read-once ring's overwrites are not "data loss"; in a
// streaming session they are.
func TestSummaryRingOverwrites(t *testing.T) {
	res := &pipeline.Result{Stats: tracefile.TraceStats{BufferStats: []tracefile.BufferStats{{ChunksOverwritten: 282688}}}}
	var b strings.Builder
	printSummary(&b, res, (&config.Config{Buffers: []config.BufferConfig{{FillPolicy: config.FillPolicyRingBuffer}}}).LossContext())
	if !strings.Contains(b.String(), "tracepipe: no data loss\n") || !strings.Contains(b.String(), "chunks_overwritten[buffer 0]=282688 (a ring read once") {
		t.Errorf("read once:\n%s", b.String())
	}
	b.Reset()
	printSummary(&b, res, (&config.Config{WriteIntoFile: true, Buffers: []config.BufferConfig{{FillPolicy: config.FillPolicyRingBuffer}}}).LossContext())
	if !strings.Contains(b.String(), "tracepipe: data loss: chunks_overwritten[buffer 0]=282688") {
		t.Errorf("streaming:\n%s", b.String())
	}
}
