package main

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
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
	out, err := runProtoVM(t, "apply", "--program", prog, trace, "--sequence", "1")
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
	_, err := runProtoVM(t, "apply", "--program", prog, trace)
	if err == nil || !strings.Contains(err.Error(), "byte 8") {
		t.Fatalf("truncated trace: %v", err)
	}
	// A malformed program is rejected with its byte offset.
	if err := os.WriteFile(prog, []byte{0x12, 0x05, 0x0a}, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runProtoVM(t, "apply", "--program", prog, trace); err == nil || !strings.Contains(err.Error(), "program byte 0") {
		t.Fatalf("bad program: %v", err)
	}
	// A compile error names the instruction and field.
	yml := filepath.Join(dir, "bad.yaml")
	os.WriteFile(yml, []byte("commands:\n  - set: {src: [foo], dst: [1]}\n"), 0o644)
	if _, err := runProtoVM(t, "compile", "-i", yml, "-o", prog); err == nil || !strings.Contains(err.Error(), "commands[0].set.src[0]") {
		t.Fatalf("compile error: %v", err)
	}
}
