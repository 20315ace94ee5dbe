package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	. "github.com/tracepipe/tracepipe/internal/tracebuild"
	"github.com/tracepipe/tracepipe/protovm"
	"github.com/tracepipe/tracepipe/tpimport"
)

const ms = 1_000_000

// goodTrace is reference §8 t2: a clock snapshot, a track descriptor, a
// synthetic CLEARED packet with the interned name, then a slice.
func goodTrace() []byte {
	return Trace(
		Packet(Seq(1), Snapshot(6, C(6, 1000*ms), C(3, 900*ms))),
		Packet(Seq(2), Descriptor(100, "t", false)),
		Packet(Seq(2), Flags(Cleared), Interned(EventName(1, "foo"))),
		Packet(Seq(2), Ts(1001*ms), Flags(Needs), Event(SliceBegin, 100, 1)),
		Packet(Seq(2), Ts(1002*ms), Flags(Needs), Event(SliceEnd, 100, 0)),
	)
}

func TestCheckCleanAndProblems(t *testing.T) {
	good := writeFile(t, "good.pftrace", goodTrace())
	stdout, stderr, code := runCLI(t, "check", good)
	if code != exitOK || !strings.Contains(stdout, good+": clean") {
		t.Fatalf("clean trace: exit %d\n%s%s", code, stdout, stderr)
	}
	// The default config's defect: write_into_file without flush_period.
	noFlush := writeFile(t, "noflush.pftrace", append(goodTrace(),
		Trace(Packet(Seq(1), TraceConfig(Config{WriteIntoFile: true, FileWritePeriodMs: 2500, FillPolicies: []uint64{1}})))...))
	stdout, _, code = runCLI(t, "check", good, noFlush)
	if code != exitProblems || !strings.Contains(stdout, "config_write_into_file_no_flush") || !strings.Contains(stdout, good+": clean") {
		t.Fatalf("exit %d\n%s", code, stdout)
	}
	// --json: one report per file.
	stdout, _, code = runCLI(t, "check", "--json", good, noFlush)
	if code != exitProblems {
		t.Fatalf("--json exit %d", code)
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	var reports []tpimport.Report
	for dec.More() {
		var r tpimport.Report
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		reports = append(reports, r)
	}
	if len(reports) != 2 || !reports[0].Clean() || reports[1].StatValue("config_write_into_file_no_flush", -1) != 1 {
		t.Fatalf("reports %+v", reports)
	}
	// An unreadable file is an error (exit 1).
	if _, _, code = runCLI(t, "check", good+".missing"); code != exitError {
		t.Fatalf("missing file: exit %d", code)
	}
}

// The issue's defects, each on a hand-built trace reproducing it.
func TestCheckFlagsIssueDefects(t *testing.T) {
	header := func() [][]byte {
		return [][]byte{
			Packet(Seq(1), Snapshot(6, C(6, 1000*ms), C(3, 900*ms))),
			Packet(Seq(2), Descriptor(100, "t", false)),
		}
	}
	begin := Packet(Seq(2), Ts(1001*ms), Flags(Needs), Event(SliceBegin, 100, 1))
	end := Packet(Seq(2), Ts(1002*ms), Flags(Needs), Event(SliceEnd, 100, 0))
	program, err := os.ReadFile("../../configs/protovm/interned_names.yaml")
	if err != nil {
		t.Fatal(err)
	}
	prog := compileYAML(t, program)
	for _, tc := range []struct {
		name  string
		trace []byte
		want  string
	}{
		{"0-slice ProtoVM replacement", Trace(append(header(),
			Packet(Seq(1), Provenance([2]uint32{2, 7})), Packet(Seq(1), ProtoVMs(prog, Packet(Flags(Cleared)), 64, 7)),
			Packet(Seq(2), Ts(1001*ms), Flags(Cleared|Needs), Interned(EventName(1, "foo")), Event(SliceBegin, 100, 1)), end)...),
			tpimport.CodeReplacedPayload},
		{"NEEDS packets after wrap", Trace(append(header(), Packet(Seq(2), Flags(Needs), Loss(65), Ts(1001*ms), Event(SliceBegin, 100, 1)), end)...),
			"packet_skipped_seq_needs_incremental_state_invalid"},
		{"rotated file without clock snapshot", Trace(Packet(Seq(2), Descriptor(100, "t", false)), begin, end),
			tpimport.CodeNoClockSnapshot},
		{"rotated file without clearing packet", Trace(Packet(Seq(2), Descriptor(100, "t", false)), begin, end),
			"packet_skipped_seq_needs_incremental_state_invalid [seq 2] ×2"},
		{"rotated file with interning in an earlier file", Trace(
			Packet(Seq(1), Snapshot(6, C(6, 1000*ms))),
			Packet(Seq(2), Descriptor(100, "t", false)), Packet(Seq(2), Flags(Cleared)), begin, end),
			tpimport.CodeUnresolvedIID},
		{"config_write_into_file_no_flush", Trace(append(header(),
			Packet(Seq(1), TraceConfig(Config{WriteIntoFile: true, FileWritePeriodMs: 2500, FillPolicies: []uint64{1}})))...),
			"config_write_into_file_no_flush"},
		{"invalid for_testing payload", Trace(append(header(), Packet(Seq(2), Ts(1001*ms), ForTesting([]byte{0, 0, 0, 0, 4, 5, 6, 7})))...),
			tpimport.CodeStrictDecode},
		{"timestamps far from the session", Trace(
			Packet(Seq(1), Snapshot(6, C(6, 6345_000*ms), C(3, 6300_000*ms))),
			Packet(Seq(2), Descriptor(100, "t", false)),
			Packet(Seq(2), Ts(1*ms), Event(Instant, 100, 0, String(23, "x"))),
			Packet(Seq(2), Ts(16*ms), Event(Instant, 100, 0, String(23, "x")))),
			tpimport.CodeTimestampsOutside},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, "t.pftrace", tc.trace)
			stdout, _, code := runCLI(t, "check", path)
			if code != exitProblems || !strings.Contains(stdout, tc.want) {
				t.Fatalf("exit %d, want %d and %s:\n%s", code, exitProblems, tc.want, stdout)
			}
		})
	}
}

// check reads zstd (and gzip, see the config test) and truncated files.
func TestCheckCompressedAndTruncated(t *testing.T) {
	var z bytes.Buffer
	zw, _ := zstd.NewWriter(&z)
	zw.Write(goodTrace())
	zw.Close()
	stdout, _, code := runCLI(t, "check", writeFile(t, "t.pftrace.zst", z.Bytes()))
	if code != exitOK || !strings.Contains(stdout, "zstd") {
		t.Fatalf("zstd: exit %d\n%s", code, stdout)
	}
	g := goodTrace()
	stdout, _, code = runCLI(t, "check", writeFile(t, "cut.pftrace", g[:len(g)-2]))
	if code != exitProblems || !strings.Contains(stdout, tpimport.CodeTruncated) {
		t.Fatalf("truncated: exit %d\n%s", code, stdout)
	}
}

func compileYAML(t *testing.T, src []byte) []byte {
	t.Helper()
	prog, err := protovm.Compile(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

// A file that stops being a trace part way is not "clean": the report
// says where checking stopped, and check exits 1.
func TestCheckMalformedIsNotClean(t *testing.T) {
	bad := writeFile(t, "bad.pftrace", append(goodTrace(), 0x74, 0x00)) // field 14, wire type 4
	stdout, stderr, code := runCLI(t, "check", bad)
	if code != exitError {
		t.Fatalf("exit %d, want %d\n%s%s", code, exitError, stdout, stderr)
	}
	if strings.Contains(stdout, bad+": clean") {
		t.Errorf("a malformed trace reported clean:\n%s", stdout)
	}
	if !strings.Contains(stdout, "not checked") || !strings.Contains(stdout, "wire type 4") {
		t.Errorf("the report does not say where checking stopped and why:\n%s", stdout)
	}
}
