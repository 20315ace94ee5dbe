package main

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/encoding/protowire"

	. "github.com/tracepipe/tracepipe/internal/tracebuild"
)

func runProtoVM(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newProtoVMCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// tracePacket builds TracePacket{trusted_packet_sequence_id: seq,
// for_testing{protovm_patch{string_to_merge: s}}}.
func tracePacket(seq uint32, s string) []byte {
	patch := protowire.AppendTag(nil, 1, protowire.BytesType)
	patch = protowire.AppendString(patch, s)
	te := protowire.AppendTag(nil, 6, protowire.BytesType)
	te = protowire.AppendBytes(te, patch)
	p := protowire.AppendTag(nil, 10, protowire.VarintType)
	p = protowire.AppendVarint(p, uint64(seq))
	p = protowire.AppendTag(p, 900, protowire.BytesType)
	return protowire.AppendBytes(p, te)
}

func traceFile(pkts ...[]byte) []byte {
	var b []byte
	for _, p := range pkts {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, p)
	}
	return b
}

func TestProtoVMCmdCompileAndApply(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog.bin")
	if out, err := runProtoVM(t, "compile", "-i", "../../protovm/testdata/service_program.yaml", "-o", prog); err != nil {
		t.Fatalf("compile: %v\n%s", err, out)
	}
	got, err := os.ReadFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	// test-vectors.md §7.1: the 86-byte service test program.
	if len(got) != 86 || !strings.HasPrefix(hex.EncodeToString(got), "0801122") {
		t.Fatalf("compiled program %x", got)
	}

	trace := filepath.Join(dir, "trace.pftrace")
	data := traceFile(tracePacket(1, "p1"), tracePacket(2, "other"), tracePacket(1, "p2"))
	if err := os.WriteFile(trace, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runProtoVM(t, "apply", "--program", prog, trace, "--sequence", "1", "--statuses")
	if err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	// Every patch lacks int_to_merge, so each is an Error, yet the string
	// is copied: last one wins.
	if !strings.Contains(out, `1: "p2"`) || strings.Contains(out, "other") {
		t.Fatalf("state dump:\n%s", out)
	}
	if strings.Count(out, ": error") != 2 || !strings.Contains(out, "# patches=2 ok=0 error=2") {
		t.Fatalf("per-patch statuses:\n%s", out)
	}
	out, err = runProtoVM(t, "apply", "--program", prog, trace, "--data-source", "for_testing")
	if err != nil || !strings.Contains(out, "# patches=3") || !strings.Contains(out, `1: "p2"`) {
		t.Fatalf("data-source filter: %v\n%s", err, out)
	}
}

func TestProtoVMCmdApplyErrors(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog.bin")
	if _, err := runProtoVM(t, "compile", "-i", "../../protovm/testdata/incremental_trace.yaml", "-o", prog); err != nil {
		t.Fatal(err)
	}
	good := traceFile([]byte{0x1a, 0x04, 0x08, 0x00, 0x10, 0x0a})
	trace := filepath.Join(dir, "t")
	// A truncated second packet: its length says 9 bytes, only 2 follow.
	bad := append(append([]byte{}, good...), 0x0a, 0x09, 0x01, 0x02)
	if err := os.WriteFile(trace, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	// It is read up to its last whole packet, with a warning naming the
	// offset.
	out, err := runProtoVM(t, "apply", "--program", prog, trace)
	if err != nil || !strings.Contains(out, "truncated") || !strings.Contains(out, "offset 8") || !strings.Contains(out, "# patches=1 ") {
		t.Fatalf("truncated trace: %v\n%s", err, out)
	}
	// A malformed program is rejected with its byte offset.
	if err := os.WriteFile(prog, []byte{0x12, 0x05, 0x0a}, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runProtoVM(t, "apply", "--program", prog, trace); err == nil || !strings.Contains(err.Error(), "byte 0") {
		t.Fatalf("bad program: %v", err)
	}
	// A compile error names the instruction and field.
	yml := filepath.Join(dir, "bad.yaml")
	os.WriteFile(yml, []byte("commands:\n  - set: {src: [foo], dst: [1]}\n"), 0o644)
	if _, err := runProtoVM(t, "compile", "-i", yml, "-o", prog); err == nil || !strings.Contains(err.Error(), "commands[0].set.src[0]") {
		t.Fatalf("compile error: %v", err)
	}
}

// apply reads YAML programs and gzip/zstd traces (the project's own
// ring_buffer.yaml output is gzip, or zstd with compression: zstd), prints the final state by default and
// a timeline with --every; --filter uses the sinks' CEL language.
func TestProtoVMApplyYAMLCompressedTimeline(t *testing.T) {
	var pkts [][]byte
	for i := uint64(1); i <= 4; i++ {
		pkts = append(pkts, Packet(Seq(2), Flags(Needs), Interned(EventName(i, "name"+strconv.FormatUint(i, 10)))))
		pkts = append(pkts, Packet(Seq(3), Interned(EventName(100+i, "other"))))
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(Trace(pkts...))
	zw.Close()
	path := writeFile(t, "ring.pftrace.gz", gz.Bytes())
	prog := "../../configs/protovm/interned_names.yaml"

	out, err := runProtoVM(t, "apply", "--program", prog, "--filter", "packet.sequence_id == 2", path)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "# patches=4 ok=4 error=0 abort=0") || strings.Count(out, "state {") != 1 ||
		!strings.Contains(out, `"name4"`) || strings.Contains(out, `"other"`) || !strings.Contains(out, "interned_data {") {
		t.Fatalf("final state:\n%s", out)
	}
	out, err = runProtoVM(t, "apply", "--program", prog, "--every", "3", path)
	if err != nil || strings.Count(out, "state {") != 3 || !strings.Contains(out, "# state after patch 6 (packet at offset") {
		t.Fatalf("--every 3 over 8 patches: %v\n%s", err, out)
	}
	if _, err := runProtoVM(t, "apply", "--program", prog, "--filter", "packet.nope", path); err == nil {
		t.Fatal("a bad filter is accepted")
	}
	// The same trace as a file sink writes it with compression: zstd.
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	zpath := writeFile(t, "ring.pftrace.zst", enc.EncodeAll(Trace(pkts...), nil))
	enc.Close()
	out, err = runProtoVM(t, "apply", "--program", prog, "--filter", "packet.sequence_id == 2", zpath)
	if err != nil || !strings.Contains(out, "# patches=4 ok=4 error=0 abort=0") || !strings.Contains(out, `"name4"`) {
		t.Fatalf("zstd trace: %v\n%s", err, out)
	}
}
