package protovm

import (
	"strings"
	"testing"
)

// TestAbortLevels checks how an Error (a SRC path absent from the patch)
// propagates under each abort level; the second instruction is a root set.
func TestProtoVMAbortLevels(t *testing.T) {
	for _, tc := range []struct {
		level    int32
		hasLevel bool
		want     Code
		setRan   bool
	}{
		{0, false, Error, false},
		{AbortSkipCurrentInstruction, true, Ok, true},
		{AbortSkipCurrentInstructionAndBreakOuter, true, Error, false},
		{AbortAbort, true, Abort, false},
		{7, true, Ok, true}, // unknown levels skip, as in Perfetto
	} {
		first := src(path(5), opSet)
		if tc.hasLevel {
			first = lvl(tc.level, first)
		}
		prog := (&Program{Instructions: []Instruction{first, opSet}}).Marshal()
		v := newVM(t, prog, tenMiB)
		st := v.ApplyPatch(hx("08 01"))
		if st.Code != tc.want {
			t.Errorf("level %d: status %v, want %v", tc.level, st, tc.want)
		}
		if got := len(v.SerializeIncrementalState(nil)) > 0; got != tc.setRan {
			t.Errorf("level %d: set ran %v, want %v", tc.level, got, tc.setRan)
		}
		if tc.want == Abort && !strings.Contains(st.Message(), "abort level = 'abort'") {
			t.Errorf("abort message %q", st.Message())
		}
	}
}

// TestNestedErrorBreaksOuter: an Error nested two levels deep stops the
// enclosing lists (default level) and the program returns Error.
func TestProtoVMNestedErrorBreaksOuter(t *testing.T) {
	prog := (&Program{Instructions: []Instruction{
		src(path(1), src(path(9), opSet), opSet),
		opSet,
	}}).Marshal()
	v := newVM(t, prog, tenMiB)
	if st := v.ApplyPatch(hx("0a 02 08 01")); st.Code != Error {
		t.Fatalf("status %v", st)
	}
	if s := v.SerializeIncrementalState(nil); len(s) != 0 {
		t.Fatalf("later instructions ran: %x", s)
	}
}

// TestStepBudget: nested iterations whose product exceeds the budget abort
// instead of running unbounded.
func TestProtoVMStepBudget(t *testing.T) {
	const n = 3000
	var state, patch []byte
	for i := 0; i < n; i++ {
		state = append(state, 0x12, 0x00)
		patch = append(patch, 0x08, 0x01)
	}
	prog := (&Program{Instructions: []Instruction{
		dst(false, rep(path(2)), src(rep(path(1)), Instruction{RegLoad: &RegLoad{HasDstRegister: true}})),
	}}).Marshal()
	v, ok, err := NewWithState(prog, tenMiB, state)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	st := v.ApplyPatch(patch)
	if st.Code != Abort || !strings.Contains(st.Message(), "step budget exceeded") {
		t.Fatalf("status %v", st.Code)
	}
	// A patch within budget still works on the same VM.
	if st := v.ApplyPatch(hx("08 01")); !st.IsOk() {
		t.Fatalf("small patch: %v", st)
	}
}

// TestDeleteRules covers del on the root, on a keyed element and the
// aliasing and invalid-cursor aborts (Perfetto's vm_unittest programs).
func TestProtoVMDeleteRules(t *testing.T) {
	aliasedRoot := (&Program{Instructions: []Instruction{dst(false, nil, opDel)}}).Marshal()
	v := newVM(t, aliasedRoot, tenMiB)
	if st := v.ApplyPatch(patchInitialState); !st.IsOk() {
		t.Fatalf("del root: %v", st)
	}
	insideSrc := (&Program{Instructions: []Instruction{dst(true, path(1), src(path(3), opDel))}}).Marshal()
	v = newVM(t, insideSrc, tenMiB)
	if st := v.ApplyPatch(patchInitialState); st.Code != Abort || !strings.Contains(st.Stack[0], "invalidate a cursor") {
		t.Fatalf("aliased del: %v", st)
	}
	nested := opDel
	nested.Nested = []Instruction{opDel}
	delDel := (&Program{Instructions: []Instruction{dst(true, path(1), nested)}}).Marshal()
	v = newVM(t, delDel, tenMiB)
	if st := v.ApplyPatch(patchInitialState); st.Code != Abort || st.Stack[0] != "Attempted to access invalid cursor" {
		t.Fatalf("del del: %v", st)
	}
}

// TestMergeRepeatedSemantics: a repeated field is replaced wholesale; a
// field id repeated within one src merge becomes a list; skip_submessages
// keeps decoded messages; del_if_src_empty deletes.
func TestProtoVMMergeRepeatedSemantics(t *testing.T) {
	rootMerge := func(m *Merge) []byte {
		return (&Program{Instructions: []Instruction{{Merge: m}}}).Marshal()
	}
	v := newVM(t, rootMerge(&Merge{}), tenMiB)
	v.ApplyPatch(hx("0a 02 08 01 0a 02 08 02"))
	wantState(t, v, "0a 02 08 01 0a 02 08 02")
	v.ApplyPatch(hx("0a 02 08 00"))
	wantState(t, v, "0a 02 08 00")
	v.ApplyPatch(hx("18 05 0a 02 08 07 0a 02 08 08"))
	wantState(t, v, "0a 02 08 07 0a 02 08 08 18 05")

	// del_if_src_empty removes the field; an empty src changes nothing.
	v = newVM(t, rootMerge(&Merge{DelIfSrcEmpty: true}), tenMiB)
	v.ApplyPatch(hx("12 02 08 01 18 05"))
	v.ApplyPatch(nil)
	wantState(t, v, "12 02 08 01 18 05")
	v.ApplyPatch(hx("12 00"))
	wantState(t, v, "18 05")

	// skip_submessages keeps a field already decoded into a message.
	prog := (&Program{Instructions: []Instruction{
		lvl(AbortSkipCurrentInstruction, src(path(2), dst(true, path(2), Instruction{Merge: &Merge{SkipSubmessages: true}}))),
		{Merge: &Merge{SkipSubmessages: true}},
	}}).Marshal()
	v = newVM(t, prog, tenMiB)
	v.ApplyPatch(hx("12 04 08 01 10 02 18 05"))
	v.ApplyPatch(hx("12 02 08 09 18 06"))
	wantState(t, v, "12 04 08 09 10 02 18 06")
}
