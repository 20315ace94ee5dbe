package protovm

import (
	"bytes"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

func hx(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(strings.ReplaceAll(s, " ", ""), "\n", ""))
	if err != nil {
		panic(err)
	}
	return b
}

// Bytes from test-vectors.md §7.
var (
	serviceProgram = hx(`08 01
12 28 0a 0d 12 03 08 84 07 12 02 08 06 12 02 08 01
      3a 17 0a 11 08 02 12 03 08 84 07 12 02 08 07 12 02 08 01 18 01
            3a 02 22 00
12 28 0a 0d 12 03 08 84 07 12 02 08 06 12 02 08 02
      3a 17 0a 11 08 02 12 03 08 84 07 12 02 08 07 12 02 08 02 18 01
            3a 02 22 00`)
	incrementalProgram = hx(`12 24 0a 06 12 04 08 01 28 01
      3a 04 12 02 10 00
      3a 14 0a 0e 08 02 12 02 08 01 12 04 18 01 30 00 18 00
            3a 02 2a 00
12 2c 0a 06 12 04 08 02 28 01
      3a 0c 0a 04 12 02 08 01 3a 04 12 02 10 00
      3a 14 0a 0e 08 02 12 02 08 01 12 04 18 01 30 00 18 01
            3a 02 1a 00
12 2c 0a 06 12 04 08 03 28 01
      3a 0c 0a 04 12 02 08 01 3a 04 12 02 10 00
      3a 14 0a 0e 08 02 12 02 08 01 12 04 18 01 30 00 18 01
            3a 02 22 00`)

	patchInitialState  = hx("1a 04 08 00 10 0a 1a 04 08 01 10 0b")
	patchDel           = hx("08 00")
	patchMerge1        = hx("12 04 08 00 10 0a")
	patchMerge2        = hx("12 04 08 00 10 64 12 04 08 01 10 65")
	patchSet           = hx("1a 02 08 00 1a 04 08 01 10 65")
	patchInconsistent  = hx("1a 15 0a 13 72 61 6e 64 6f 6d 20 69 6e 76 61 6c 69 64 20 64 61 74 61")
	traceEntryTwoElems = hx("0a 12 08 00 10 0a 1d 20 00 00 00 21 40 00 00 00 00 00 00 00 0a 04 08 01 10 0b")
	tenMiB             = 10 << 20
)

func newVM(t testing.TB, prog []byte, limit int) *VM {
	t.Helper()
	v, err := New(prog, limit)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func wantState(t testing.TB, v *VM, want string) {
	t.Helper()
	if got := v.SerializeIncrementalState(nil); !bytes.Equal(got, hx(want)) {
		t.Fatalf("state %x, want %s", got, strings.ReplaceAll(want, " ", ""))
	}
}

func TestProtoVMVectorsService(t *testing.T) {
	v := newVM(t, serviceProgram, 16*1024)
	st := v.ApplyPatch(hx("a2 38 06 32 04 0a 02 70 31"))
	if st.Code != Error {
		t.Fatalf("status %v, want error (int_to_merge absent)", st)
	}
	wantState(t, v, "a2 38 06 3a 04 0a 02 70 31")
	if s := v.Stats(); s.PatchesFailed != 1 || s.PatchesApplied != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestProtoVMVectorsIncremental(t *testing.T) {
	v := newVM(t, incrementalProgram, tenMiB)
	wantState(t, v, "")
	if st := v.ApplyPatch(patchInitialState); !st.IsOk() {
		t.Fatal(st)
	}
	wantState(t, v, "0a 04 08 00 10 0a 0a 04 08 01 10 0b")
	if st := v.ApplyPatch(patchDel); !st.IsOk() {
		t.Fatal(st)
	}
	wantState(t, v, "0a 04 08 01 10 0b")

	v = newVM(t, incrementalProgram, tenMiB)
	v.ApplyPatch(patchMerge1)
	wantState(t, v, "0a 04 08 00 10 0a")
	v.ApplyPatch(patchMerge2)
	wantState(t, v, "0a 04 08 00 10 64 0a 04 08 01 10 65")

	v = newVM(t, incrementalProgram, tenMiB)
	v.ApplyPatch(nil)
	wantState(t, v, "")
	v.ApplyPatch(patchInitialState)
	v.ApplyPatch(patchSet)
	wantState(t, v, "0a 02 08 00 0a 04 08 01 10 65")

	v = newVM(t, incrementalProgram, tenMiB)
	st := v.ApplyPatch(patchInconsistent)
	if st.Code != Abort || len(st.Stack) == 0 || !strings.Contains(st.Stack[0], "Attempted to access length-delimited field as a scalar") {
		t.Fatalf("status %v", st)
	}
}

func TestProtoVMInitialStateAndClone(t *testing.T) {
	v, ok, err := NewWithState(incrementalProgram, tenMiB, hx("0a 04 08 00 10 0a 0a 04 08 01 10 0b"))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	wantState(t, v, "0a 04 08 00 10 0a 0a 04 08 01 10 0b")

	v = newVM(t, incrementalProgram, tenMiB)
	if v.MemoryUsage() != len(incrementalProgram) {
		t.Fatalf("fresh usage %d", v.MemoryUsage())
	}
	v.ApplyPatch(patchInitialState)
	c := v.CloneReadOnly()
	if v.MemoryUsage() <= len(incrementalProgram) || c.MemoryUsage() <= len(incrementalProgram) {
		t.Fatalf("usage %d / clone %d", v.MemoryUsage(), c.MemoryUsage())
	}
	if st := c.ApplyPatch(patchDel); st.Code != Abort || len(st.Stack) != 0 {
		t.Fatalf("clone status %v", st)
	}
	wantState(t, c, "0a 04 08 00 10 0a 0a 04 08 01 10 0b")
	// The original keeps running independently.
	v.ApplyPatch(patchDel)
	wantState(t, v, "0a 04 08 01 10 0b")
	wantState(t, c, "0a 04 08 00 10 0a 0a 04 08 01 10 0b")

	// An initial state over the limit is dropped.
	v, ok, err = NewWithState(incrementalProgram, 16, traceEntryTwoElems)
	if err != nil || ok {
		t.Fatal(ok, err)
	}
	wantState(t, v, "")
}

func TestProtoVMMemoryLimitCounted(t *testing.T) {
	v := newVM(t, incrementalProgram, 3*NodeCost)
	st := v.ApplyPatch(patchInitialState)
	if st.Code != Abort || !strings.Contains(st.Stack[0], "Failed to allocate element") {
		t.Fatalf("status %v", st)
	}
	if s := v.Stats(); s.MemoryLimitHits != 1 || s.PatchesAborted != 1 {
		t.Fatalf("stats %+v", s)
	}
	if used := v.MemoryUsage() - len(incrementalProgram); used > 3*NodeCost {
		t.Fatalf("usage %d over limit", used)
	}
}

func TestProtoVMCompileVectors(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []byte
	}{
		{"testdata/service_program.yaml", serviceProgram},
		{"testdata/incremental_trace.yaml", incrementalProgram},
	} {
		src, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Compile(src, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if !bytes.Equal(got, tc.want) {
			t.Errorf("%s:\n got %x\nwant %x", tc.file, got, tc.want)
		}
	}
}

func TestProtoVMParseProgramRoundTrip(t *testing.T) {
	for _, prog := range [][]byte{serviceProgram, incrementalProgram} {
		p, err := ParseProgram(prog)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Marshal(); !bytes.Equal(got, prog) {
			t.Fatalf("round trip\n got %x\nwant %x", got, prog)
		}
	}
}

func TestProtoVMParseProgramErrors(t *testing.T) {
	for _, tc := range []struct {
		prog string
		want string
	}{
		{"12", "byte 0"},
		{"12 05 0a 02", "byte 0"},
		{"08 ff", "VmProgram field 1"},
		{"12 04 0a 02 08 02 12 03 0a 01 12", "byte 10 (VmOpSelect field 2)"},
		{"12 03 0a 01 08", "byte 4 (VmOpSelect field 1)"},
		{"12 02 32 00", "VmInstruction.abort_level"},
	} {
		_, err := ParseProgram(hx(tc.prog))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want it to mention %q", tc.prog, err, tc.want)
		}
	}
	// Nesting bound.
	deep := []byte{}
	for i := 0; i < MaxProgramNesting+2; i++ {
		deep = appendLen(7, deep)
	}
	prog := appendLen(2, deep)
	if _, err := ParseProgram(prog); err == nil || !strings.Contains(err.Error(), "nesting") {
		t.Fatalf("deep program: %v", err)
	}
}

func appendLen(num byte, inner []byte) []byte {
	out := appendTag(nil, uint32(num), wireLen)
	out = appendVarint(out, uint64(len(inner)))
	return append(out, inner...)
}
