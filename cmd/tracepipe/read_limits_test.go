package main

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/tracefile"
)

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// writeBigRecordGzip writes a gzip trace: a producer packet, one packet on
// sequence 2 with an n-byte for_testing payload (never held in memory), and
// the final TraceStats.
func writeBigRecordGzip(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "big.pftrace.gz")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	w := bufio.NewWriter(zw)
	head := tracefile.AppendTimestamp(nil, 105)
	head = tracefile.AppendTrusted(head, tracefile.Trusted{UID: 1000, SequenceID: 2})
	head = protowire.AppendTag(head, tracefile.FieldForTesting, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(n))
	b := tracefile.AppendRecord(nil, producerPacket(2, 0, 100, "a"))
	b = tracefile.AppendRecordHeader(b, len(head)+n)
	b = append(b, head...)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(w, zeroReader{}, int64(n)); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(tracefile.AppendRecord(nil, statsPacket(cleanStats(), 150))); err != nil {
		t.Fatal(err)
	}
	for _, c := range []interface{ Close() error }{closerFunc(w.Flush), zw, f} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

type closerFunc func() error

func (c closerFunc) Close() error { return c() }

// TestReadersBigRecordBoundedMemory: stats, check and inspect read a gzip
// file holding one 64 MiB packet without holding it (reading it whole costs
// at least its size), count it, and say that its field was skipped unread.
func TestReadersBigRecordBoundedMemory(t *testing.T) {
	const n = 64 << 20
	path := writeBigRecordGzip(t, n)
	for _, tc := range []struct {
		args     []string
		code     int
		inStdout string
		inStderr string
	}{
		{[]string{"stats", path}, 0, "no data loss recorded", "1 packet(s) longer than the packet buffer"},
		{[]string{"check", path}, exitProblems, "packet_fields_skipped", ""},
		{[]string{"inspect", "--packets", "3", path}, 0, "packets not read whole:", ""},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			stdout, stderr, code := runCLI(t, tc.args...)
			runtime.ReadMemStats(&after)
			if code != tc.code || !strings.Contains(stdout, tc.inStdout) || !strings.Contains(stderr, tc.inStderr) {
				t.Fatalf("exit %d (want %d)\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > n/2 {
				t.Fatalf("%s allocated %d bytes for a %d-byte packet", tc.args[0], alloc, n)
			}
		})
	}
	// With a buffer large enough, the packet is read whole: its zeros are
	// checked (strict decoders reject them) and nothing is skipped.
	stdout, _, code := runCLI(t, "check", "--max-packet-buffer", "134217728", path)
	if code != exitProblems || strings.Contains(stdout, "packet_fields_skipped") || !strings.Contains(stdout, "strict_decode") {
		t.Fatalf("check with a 128 MiB buffer: exit %d\n%s", code, stdout)
	}
}

// TestReadersMaxSequencesFlag: check and inspect honour --max-sequences and
// say that they summarised.
func TestReadersMaxSequencesFlag(t *testing.T) {
	var pkts [][]byte
	for i := 0; i < 3000; i++ {
		pkts = append(pkts, producerPacket(uint32(2+i), 0, uint64(100+i), "x"))
	}
	pkts = append(pkts, statsPacket(cleanStats(), 5000))
	path := writeFile(t, "seqs.pftrace", traceOf(pkts...))
	stdout, _, _ := runCLI(t, "check", "--max-sequences", "100", path)
	if !strings.Contains(stdout, "sequences beyond the 100 tracked: their per-sequence checks were summarised") {
		t.Fatalf("check output:\n%s", stdout)
	}
	if strings.Count(stdout, "\n") > 150 {
		t.Fatalf("check printed %d lines for 100 tracked sequences", strings.Count(stdout, "\n"))
	}
	stdout, _, code := runCLI(t, "inspect", "--max-sequences", "100", path)
	if code != 0 || !strings.Contains(stdout, "sequences beyond the 100 tracked") || !strings.Contains(stdout, "\nothers ") {
		t.Fatalf("inspect exit %d:\n%s", code, stdout)
	}
	for _, cmd := range []string{"check", "inspect"} {
		if _, _, code := runCLI(t, cmd, "--max-sequences", "0", path); code != 2 {
			t.Fatalf("%s --max-sequences 0: exit %d, want 2", cmd, code)
		}
	}
}

// TestApplyOversizedPacket: apply skips an unselected packet longer than
// the packet buffer unread, and stops with an error naming the flag when
// such a packet is selected (a replay without it would be wrong).
func TestApplyOversizedPacket(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog.bin")
	if out, err := runProtoVM(t, "compile", "-i", "../../protovm/testdata/service_program.yaml", "-o", prog); err != nil {
		t.Fatalf("compile: %v\n%s", err, out)
	}
	trace := writeFile(t, "big.pftrace", traceFile(tracePacket(1, "p1"), tracePacket(2, strings.Repeat("x", 100_000)), tracePacket(1, "p2")))
	out, err := runProtoVM(t, "apply", "--program", prog, "--max-packet-buffer", "4096", "--sequence", "1", trace)
	if err != nil || !strings.Contains(out, "# patches=2 ") {
		t.Fatalf("apply --sequence 1: %v\n%s", err, out)
	}
	_, err = runProtoVM(t, "apply", "--program", prog, "--max-packet-buffer", "4096", "--sequence", "2", trace)
	if err == nil || !strings.Contains(err.Error(), "raise --max-packet-buffer") || !strings.Contains(err.Error(), "offset ") {
		t.Fatalf("apply --sequence 2: %v", err)
	}
	if out, err := runProtoVM(t, "apply", "--program", prog, "--sequence", "2", trace); err != nil || !strings.Contains(out, "# patches=1 ") {
		t.Fatalf("apply with the default buffer: %v\n%s", err, out)
	}
}
