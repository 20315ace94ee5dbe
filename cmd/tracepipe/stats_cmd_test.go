package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/tracefile"
)

// bufferCounter is one BufferStats counter as trace-buffer-v2.md §13 names
// it, with whether `stats` must classify it as data loss.
type bufferCounter struct {
	name string
	loss bool
	set  func(*tracefile.BufferStats, uint64)
}

// bufferCounters lists all 20 BufferStats counters (§13; 21 is reserved).
var bufferCounters = []bufferCounter{
	{"buffer_size", false, func(s *tracefile.BufferStats, v uint64) { s.BufferSize = v }},
	{"bytes_written", false, func(s *tracefile.BufferStats, v uint64) { s.BytesWritten = v }},
	{"bytes_overwritten", true, func(s *tracefile.BufferStats, v uint64) { s.BytesOverwritten = v }},
	{"bytes_read", false, func(s *tracefile.BufferStats, v uint64) { s.BytesRead = v }},
	{"padding_bytes_written", false, func(s *tracefile.BufferStats, v uint64) { s.PaddingBytesWritten = v }},
	{"padding_bytes_cleared", false, func(s *tracefile.BufferStats, v uint64) { s.PaddingBytesCleared = v }},
	{"chunks_written", false, func(s *tracefile.BufferStats, v uint64) { s.ChunksWritten = v }},
	{"chunks_rewritten", false, func(s *tracefile.BufferStats, v uint64) { s.ChunksRewritten = v }},
	{"chunks_relocated", false, func(s *tracefile.BufferStats, v uint64) { s.ChunksRelocated = v }},
	{"chunks_overwritten", true, func(s *tracefile.BufferStats, v uint64) { s.ChunksOverwritten = v }},
	{"chunks_discarded", true, func(s *tracefile.BufferStats, v uint64) { s.ChunksDiscarded = v }},
	{"chunks_read", false, func(s *tracefile.BufferStats, v uint64) { s.ChunksRead = v }},
	{"chunks_committed_out_of_order", false, func(s *tracefile.BufferStats, v uint64) { s.ChunksCommittedOutOfOrder = v }},
	{"write_wrap_count", false, func(s *tracefile.BufferStats, v uint64) { s.WriteWrapCount = v }},
	{"patches_succeeded", false, func(s *tracefile.BufferStats, v uint64) { s.PatchesSucceeded = v }},
	{"patches_failed", true, func(s *tracefile.BufferStats, v uint64) { s.PatchesFailed = v }},
	{"readaheads_succeeded", false, func(s *tracefile.BufferStats, v uint64) { s.ReadaheadsSucceeded = v }},
	{"readaheads_failed", false, func(s *tracefile.BufferStats, v uint64) { s.ReadaheadsFailed = v }},
	{"abi_violations", true, func(s *tracefile.BufferStats, v uint64) { s.AbiViolations = v }},
	{"trace_writer_packet_loss", true, func(s *tracefile.BufferStats, v uint64) { s.TraceWriterPacketLoss = v }},
}

// counterValue is the value the lossy fixture gives counter i of buffer b:
// distinct for every (buffer, counter) so a row cannot match another's.
func counterValue(b, i int) uint64 { return uint64(1000*(b+1) + 7*i + 3) }

// lossyStats holds 2 buffers with every counter non-zero (so data_loss
// ones included) and a few service-level counters.
func lossyStats() *tracefile.TraceStats {
	ts := &tracefile.TraceStats{
		ProducersConnected: 2, ProducersSeen: 3, TracingSessions: 1, TotalBuffers: 2,
		FlushesRequested: 4, FlushesSucceeded: 4, FinalFlushOutcome: tracefile.FlushOutcomeSucceeded,
		BufferStats: make([]tracefile.BufferStats, 2),
	}
	for b := range ts.BufferStats {
		for i, c := range bufferCounters {
			c.set(&ts.BufferStats[b], counterValue(b, i))
		}
	}
	return ts
}

// cleanStats holds 2 buffers with volume counters only: no data loss.
func cleanStats() *tracefile.TraceStats {
	ts := &tracefile.TraceStats{TracingSessions: 1, TotalBuffers: 2, BufferStats: make([]tracefile.BufferStats, 2),
		FinalFlushOutcome: tracefile.FlushOutcomeSucceeded}
	for b := range ts.BufferStats {
		for i, c := range bufferCounters {
			if !c.loss {
				c.set(&ts.BufferStats[b], counterValue(b, i))
			}
		}
	}
	return ts
}

// producerPacket is a packet as the service writes it: a timestamp, a
// for_testing payload, then the trusted fields (sequence id and, when
// non-zero, the previous_packet_dropped loss mask).
func producerPacket(seq, dropped uint32, ts uint64, payload string) []byte {
	p := tracefile.AppendTimestamp(nil, ts)
	p = protowire.AppendTag(p, tracefile.FieldForTesting, protowire.BytesType)
	p = protowire.AppendString(p, payload)
	return tracefile.AppendTrusted(p, tracefile.Trusted{UID: 1000, SequenceID: seq, PreviousPacketDropped: dropped})
}

// traceOf frames packets as a Trace.
func traceOf(pkts ...[]byte) []byte {
	var b []byte
	for _, p := range pkts {
		b = tracefile.AppendRecord(b, p)
	}
	return b
}

func statsPacket(ts *tracefile.TraceStats, timestamp uint64) []byte {
	return tracefile.AppendTraceStatsPacket(nil, ts, 0, timestamp)
}

// lossyTrace: producer packets on sequences 2 and 3, three of them flagged
// with previous_packet_dropped, an early TraceStats packet with other
// values, and the final TraceStats (lossyStats).
func lossyTrace() []byte {
	early := &tracefile.TraceStats{BufferStats: make([]tracefile.BufferStats, 2)}
	early.BufferStats[0].ChunksOverwritten = 999999
	return traceOf(
		producerPacket(2, 0, 100, "a"),
		producerPacket(2, tracefile.LossPresent|tracefile.LossOverwrite, 110, "b"),
		producerPacket(3, 0, 120, "c"),
		statsPacket(early, 125),
		producerPacket(3, tracefile.LossPresent|tracefile.LossReadGap, 130, "d"),
		producerPacket(2, tracefile.LossPresent|tracefile.LossOverwrite, 140, "e"),
		statsPacket(lossyStats(), 150),
	)
}

func cleanTrace() []byte {
	return traceOf(
		producerPacket(2, 0, 100, "a"),
		producerPacket(2, 0, 110, "b"),
		statsPacket(cleanStats(), 150),
	)
}

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	return testsupport.WriteTempFile(t, name, data)
}

// rowRE matches one line of the loss table.
func rowRE(scope, name, severity string, value uint64) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^!?\s+` + regexp.QuoteMeta(scope) + `\s+` + name + `\s+` + severity + `\s+` + fmt.Sprint(value) + `$`)
}

// checkBufferRows checks that out holds every BufferStats counter of both
// buffers of lossyStats with its severity and value.
func checkBufferRows(t *testing.T, out string, stats *tracefile.TraceStats) {
	t.Helper()
	for b := range stats.BufferStats {
		for i, c := range bufferCounters {
			want := counterValue(b, i)
			sev := tracefile.SeverityInfo
			if c.loss {
				sev = tracefile.SeverityDataLoss
			}
			re := rowRE(fmt.Sprintf("buffer %d", b), c.name, sev, want)
			if !re.MatchString(out) {
				t.Errorf("no row for buffer %d %s %s = %d", b, c.name, sev, want)
			}
			if c.loss && !regexp.MustCompile(`(?m)^!\s+buffer `+fmt.Sprint(b)+`\s+`+c.name+`\s`).MatchString(out) {
				t.Errorf("buffer %d %s is not marked as lost", b, c.name)
			}
		}
	}
}

func TestStatsPrintsEveryCounter(t *testing.T) {
	path := writeFile(t, "lossy.pftrace", lossyTrace())
	stdout, stderr, code := runCLI(t, "stats", path)
	if code != exitOK || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	header := strings.SplitN(stdout, "\n", 2)[0]
	for _, want := range []string{path, "7 packet(s) read", "2 TraceStats packet(s)"} {
		if !strings.Contains(header, want) {
			t.Errorf("header %q lacks %q", header, want)
		}
	}
	checkBufferRows(t, stdout, lossyStats())
	// The first TraceStats packet's values are not shown: the last wins.
	if strings.Contains(stdout, "999999") {
		t.Errorf("stats printed an earlier TraceStats packet:\n%s", stdout)
	}
	for _, want := range []*regexp.Regexp{
		rowRE("service", "producers_seen", "info", 3),
		rowRE("service", "total_buffers", "info", 2),
		rowRE("service", "invalid_packets", "data_loss", 0),
		regexp.MustCompile(`DATA LOSS: 12 counter\(s\) non-zero`),
		regexp.MustCompile(`previous_packet_dropped: 3 packet\(s\) flagged on 2 sequence\(s\)`),
		regexp.MustCompile(`(?m)^  sequence 2: 2 packet\(s\) \(PRESENT\|OVERWRITE: 2\)$`),
		regexp.MustCompile(`(?m)^  sequence 3: 1 packet\(s\) \(PRESENT\|READ_GAP: 1\)$`),
	} {
		if !want.MatchString(stdout) {
			t.Errorf("output does not match %s:\n%s", want, stdout)
		}
	}
}

func TestStatsAll(t *testing.T) {
	path := writeFile(t, "lossy.pftrace", lossyTrace())
	stdout, _, code := runCLI(t, "stats", "--all", path)
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(stdout, "TraceStats 1 of 2") || !strings.Contains(stdout, "TraceStats 2 of 2") ||
		!rowRE("buffer 0", "chunks_overwritten", "data_loss", 999999).MatchString(stdout) {
		t.Errorf("--all does not show both TraceStats packets:\n%s", stdout)
	}
	checkBufferRows(t, stdout, lossyStats())
}

func TestStatsFailOnLoss(t *testing.T) {
	lossy := writeFile(t, "lossy.pftrace", lossyTrace())
	stdout, stderr, code := runCLI(t, "stats", "--fail-on-loss", lossy)
	if code != exitDataLoss {
		t.Fatalf("lossy trace: exit %d, want %d; stderr %q", code, exitDataLoss, stderr)
	}
	checkBufferRows(t, stdout, lossyStats())
	for _, want := range []string{"buffer 0 chunks_overwritten=" + fmt.Sprint(counterValue(0, 9)),
		"buffer 1 trace_writer_packet_loss=" + fmt.Sprint(counterValue(1, 19)),
		"3 packet(s) with previous_packet_dropped (sequence 2, 3)"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q: %q", want, stderr)
		}
	}
	if strings.Contains(stderr, "bytes_written=") {
		t.Errorf("an info counter is reported as loss: %q", stderr)
	}

	clean := writeFile(t, "clean.pftrace", cleanTrace())
	stdout, stderr, code = runCLI(t, "stats", "--fail-on-loss", clean)
	if code != exitOK || stderr != "" {
		t.Fatalf("clean trace: exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(stdout, "no data loss recorded") || !strings.Contains(stdout, "previous_packet_dropped: no packet flagged") {
		t.Errorf("clean trace output:\n%s", stdout)
	}
	checkRows := func(out string) {
		for i, c := range bufferCounters {
			want := counterValue(1, i)
			if c.loss {
				want = 0
			}
			if !rowRE("buffer 1", c.name, map[bool]string{true: "data_loss", false: "info"}[c.loss], want).MatchString(out) {
				t.Errorf("clean trace: no row buffer 1 %s = %d", c.name, want)
			}
		}
	}
	checkRows(stdout)

	// Clean counters, but one packet flagged: still data loss.
	flagged := writeFile(t, "flagged.pftrace", traceOf(
		producerPacket(5, 0, 1, "a"),
		producerPacket(5, tracefile.LossPresent|tracefile.LossSMBFull, 2, "b"),
		statsPacket(cleanStats(), 3)))
	_, stderr, code = runCLI(t, "stats", "--fail-on-loss", flagged)
	if code != exitDataLoss || !strings.Contains(stderr, "1 packet(s) with previous_packet_dropped (sequence 5)") ||
		strings.Contains(stderr, "=") {
		t.Errorf("flagged packet: exit %d, stderr %q", code, stderr)
	}
	// Without --fail-on-loss a lossy trace exits 0.
	if _, _, code := runCLI(t, "stats", lossy); code != exitOK {
		t.Errorf("lossy trace without --fail-on-loss: exit %d", code)
	}
}

func TestStatsTruncated(t *testing.T) {
	full := lossyTrace()
	// kill -9 in the middle of a packet written after the final stats.
	tail := tracefile.AppendRecord(nil, producerPacket(2, 0, 200, "cut short"))
	cut := append(append([]byte{}, full...), tail[:len(tail)-3]...)
	path := writeFile(t, "cut.pftrace", cut)
	stdout, stderr, code := runCLI(t, "stats", path)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(stderr, "truncated") || !strings.Contains(stderr, path) {
		t.Errorf("truncation not reported: %q", stderr)
	}
	checkBufferRows(t, stdout, lossyStats())
	if _, _, code := runCLI(t, "stats", "--fail-on-loss", path); code != exitDataLoss {
		t.Errorf("--fail-on-loss on a truncated lossy trace: exit %d", code)
	}

	// The final TraceStats packet itself is cut: the earlier one is shown.
	statsRec := tracefile.AppendRecord(nil, statsPacket(lossyStats(), 150))
	cut = full[:len(full)-len(statsRec)+len(statsRec)/2]
	path = writeFile(t, "cut2.pftrace", cut)
	stdout, stderr, code = runCLI(t, "stats", path)
	if code != exitOK || !strings.Contains(stderr, "truncated") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if !rowRE("buffer 0", "chunks_overwritten", "data_loss", 999999).MatchString(stdout) {
		t.Errorf("the last complete TraceStats packet is not shown:\n%s", stdout)
	}
}

func TestStatsErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such.pftrace")
	_, stderr, code := runCLI(t, "stats", missing)
	if code != exitError || !strings.HasPrefix(stderr, "tracepipe: ") || !strings.Contains(stderr, missing) {
		t.Errorf("missing file: exit %d, stderr %q", code, stderr)
	}

	none := writeFile(t, "nostats.pftrace", traceOf(producerPacket(2, 0, 1, "a"), producerPacket(2, 0, 2, "b")))
	stdout, stderr, code := runCLI(t, "stats", none)
	if code != exitError || !strings.Contains(stderr, "no TraceStats packet") || !strings.Contains(stderr, "cut before the session ended") ||
		!strings.Contains(stderr, none) {
		t.Errorf("no TraceStats: exit %d, stderr %q", code, stderr)
	}
	if stdout != "" {
		t.Errorf("no TraceStats: stdout %q", stdout)
	}

	// A truncated file without any TraceStats: both are said, exit 1.
	trunc := traceOf(producerPacket(2, 0, 1, "a"))
	path := writeFile(t, "trunc-nostats.pftrace", trunc[:len(trunc)-1])
	_, stderr, code = runCLI(t, "stats", path)
	if code != exitError || !strings.Contains(stderr, "truncated") || !strings.Contains(stderr, "no TraceStats packet in 0 packet(s)") {
		t.Errorf("truncated, no TraceStats: exit %d, stderr %q", code, stderr)
	}

	// A malformed record after the stats: the stats are shown, exit 1.
	bad := append(lossyTrace(), 0x08, 0x01) // field 1 as a varint
	path = writeFile(t, "bad.pftrace", bad)
	stdout, stderr, code = runCLI(t, "stats", path)
	if code != exitError || !strings.Contains(stderr, "malformed") {
		t.Errorf("malformed trace: exit %d, stderr %q", code, stderr)
	}
	checkBufferRows(t, stdout, lossyStats())
}

func TestStatsCompressed(t *testing.T) {
	raw := lossyTrace()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(raw)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	zs := enc.EncodeAll(raw, nil)
	enc.Close()
	for _, c := range []struct {
		name string
		data []byte
	}{{"gzip", gz.Bytes()}, {"zstd", zs}} {
		path := writeFile(t, "trace."+c.name, c.data)
		stdout, stderr, code := runCLI(t, "stats", "--fail-on-loss", path)
		if code != exitDataLoss || !strings.Contains(stderr, "chunks_overwritten=") {
			t.Errorf("%s: exit %d, stderr %q", c.name, code, stderr)
		}
		if !strings.Contains(stdout, "compression "+c.name) {
			t.Errorf("%s: header does not name the compression:\n%s", c.name, stdout)
		}
		checkBufferRows(t, stdout, lossyStats())

		// A compressed stream cut short is a truncation too.
		path = writeFile(t, "cut."+c.name, c.data[:len(c.data)*3/4])
		_, stderr, code = runCLI(t, "stats", path)
		// Depending on what the cut leaves, the early TraceStats is shown
		// (exit 0) or none is complete (exit 1); either way the
		// truncation is reported.
		if (code != exitOK && code != exitError) || !strings.Contains(stderr, "truncated") {
			t.Errorf("%s cut: exit %d, stderr %q", c.name, code, stderr)
		}
	}
}

func TestStatsJSON(t *testing.T) {
	path := writeFile(t, "lossy.pftrace", lossyTrace())
	stdout, stderr, code := runCLI(t, "stats", "--json", path)
	if code != exitOK || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	counters := map[string]statsJSONCounter{}
	var trace statsJSONTrace
	var dropped []statsJSONDropped
	sc := bufio.NewScanner(strings.NewReader(stdout))
	for sc.Scan() {
		var kind struct{ Type string }
		if err := json.Unmarshal(sc.Bytes(), &kind); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		switch kind.Type {
		case "trace":
			json.Unmarshal(sc.Bytes(), &trace)
		case "counter":
			var c statsJSONCounter
			json.Unmarshal(sc.Bytes(), &c)
			counters[fmt.Sprintf("%d/%s", c.Index, c.Counter)] = c
		case "previous_packet_dropped":
			var d statsJSONDropped
			json.Unmarshal(sc.Bytes(), &d)
			dropped = append(dropped, d)
		default:
			t.Errorf("unknown row type in %q", sc.Text())
		}
	}
	if trace.Packets != 7 || trace.TraceStatsPackets != 2 || trace.File != path || trace.DroppedPackets != 3 {
		t.Errorf("trace row %+v", trace)
	}
	for b := 0; b < 2; b++ {
		for i, c := range bufferCounters {
			got, ok := counters[fmt.Sprintf("%d/%s", b, c.name)]
			if !ok || got.Value != counterValue(b, i) || got.Lost != c.loss || got.Scope != "buffer" {
				t.Errorf("buffer %d %s: %+v (found %v)", b, c.name, got, ok)
			}
		}
	}
	if len(dropped) != 2 || dropped[0].Sequence != 2 || dropped[0].Packets != 2 || dropped[0].Reason != "PRESENT|OVERWRITE" ||
		dropped[1].Sequence != 3 || dropped[1].Mask != tracefile.LossPresent|tracefile.LossReadGap {
		t.Errorf("dropped rows %+v", dropped)
	}
}

// A data source that failed says why, not only how often: its error
// (recorded in the trace's stats) is printed under the table.
func TestStatsPrintsDataSourceErrors(t *testing.T) {
	ts := cleanStats()
	ts.Tracepipe = &tracefile.TracepipeStats{Producers: []tracefile.ProducerStats{
		{Index: 2, Source: "./my-plugin", Error: "start: exited with status 2 during Start: opening /dev/x: no such device"},
	}}
	path := writeFile(t, "failed.pftrace", traceOf(producerPacket(2, 0, 100, "a"), statsPacket(ts, 150)))
	stdout, stderr, code := runCLI(t, "stats", path)
	want := "data_sources[2] (./my-plugin): start: exited with status 2 during Start: opening /dev/x: no such device\n"
	if code != exitOK || !strings.Contains(stdout, want) {
		t.Fatalf("exit %d, stderr %q, stdout lacks %q:\n%s", code, stderr, want, stdout)
	}
}
