package protovm

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// internedNamesPath is the shipped program for interned event names.
const internedNamesPath = "../configs/protovm/interned_names.yaml"

func internedNamesYAML(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(internedNamesPath)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// iname is one interned entry (EventName or EventCategory).
type iname struct {
	iid  uint64
	name string
}

// internedPacket builds TracePacket{timestamp 8, interned_data 12 {
// event_categories 1..., event_names 2...}, track_event 11 {name_iid 10}}.
// interned_data is omitted when both lists are nil; track_event when ref is
// 0.
func internedPacket(ts uint64, names, cats []iname, ref uint64) []byte {
	p := msg(8, ts)
	if names != nil || cats != nil {
		var id []byte
		for _, c := range cats {
			id = append(id, msg(1, msg(1, c.iid, 2, c.name))...)
		}
		for _, n := range names {
			id = append(id, msg(2, msg(1, n.iid, 2, n.name))...)
		}
		p = append(p, msg(12, id)...)
	}
	if ref != 0 {
		p = append(p, msg(11, msg(10, ref))...)
	}
	return p
}

// internedEntries decodes the interned names and categories of a
// TracePacket (a state or a packet). strict also checks the state shape:
// only interned_data at the top, only fields 1 and 2 in it, each entry
// exactly {iid, name}, in ascending iid order with no duplicates.
func internedEntries(t testing.TB, pkt []byte, strict bool) (names, cats map[uint64]string) {
	t.Helper()
	names, cats = map[uint64]string{}, map[uint64]string{}
	for _, f := range decodeWire(t, pkt) {
		if f.num != 12 {
			if strict {
				t.Fatalf("state has TracePacket field %d", f.num)
			}
			continue
		}
		var last [3]uint64
		var seen [3]bool
		for _, e := range decodeWire(t, f.b) {
			if e.num != 1 && e.num != 2 {
				if strict {
					t.Fatalf("state interned_data has field %d", e.num)
				}
				continue
			}
			var iid uint64
			var name string
			hasIID, hasName := false, false
			for _, g := range decodeWire(t, e.b) {
				switch {
				case g.num == 1 && g.typ == protowire.VarintType:
					iid, hasIID = g.v, true
				case g.num == 2 && g.typ == protowire.BytesType:
					name, hasName = string(g.b), true
				case strict:
					t.Fatalf("state entry has field %d type %d", g.num, g.typ)
				}
			}
			if strict {
				if !hasIID || !hasName {
					t.Fatalf("state entry without iid or name: %x", e.b)
				}
				if seen[e.num] && iid <= last[e.num] {
					t.Fatalf("state entries of field %d not in ascending iid order: %d after %d", e.num, iid, last[e.num])
				}
				seen[e.num], last[e.num] = true, iid
			}
			if e.num == 2 {
				names[iid] = name
			} else {
				cats[iid] = name
			}
		}
	}
	return names, cats
}

func TestProtoVMInternedNamesLowering(t *testing.T) {
	got, err := Compile(internedNamesYAML(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Perfetto's lowering of `merge {key_field}` (protovm.md §8.2), written
	// out as VM instructions.
	const lowered = `
instructions:
  - select: {path: [12, "2[]"]}
    nested:
      - select: {path: [1]}
        abort_level: ABORT
        nested: [{reg_load: {register: 0}}]
      - select: {cursor: DST, create_if_not_exist: true, path: [12, 2, {map_key: 1, register: 0}]}
        nested: [{merge: {del_if_src_empty: true}}]
  - select: {path: [12, "1[]"]}
    nested:
      - select: {path: [1]}
        abort_level: ABORT
        nested: [{reg_load: {register: 0}}]
      - select: {cursor: DST, create_if_not_exist: true, path: [12, 1, {map_key: 1, register: 0}]}
        nested: [{merge: {del_if_src_empty: true}}]
`
	if want := mustCompile(t, lowered); !bytes.Equal(got, want) {
		t.Fatalf("program bytes\n got  %x\n want %x", got, want)
	}
}

func TestProtoVMInternedNamesProgram(t *testing.T) {
	prog, err := Compile(internedNamesYAML(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	vm := newVM(t, prog, 64*1024)
	type step struct {
		pkt   []byte
		code  Code
		names map[uint64]string // expected state after the step
		cats  map[uint64]string
	}
	steps := []step{
		{internedPacket(1, []iname{{1, "alpha"}, {2, "beta"}}, []iname{{1, "cat"}}, 1), Ok,
			map[uint64]string{1: "alpha", 2: "beta"}, map[uint64]string{1: "cat"}},
		// No interned_data: Error, state unchanged.
		{internedPacket(2, nil, nil, 2), Error,
			map[uint64]string{1: "alpha", 2: "beta"}, map[uint64]string{1: "cat"}},
		// Re-definition of iid 2 (last wins), a new iid out of order.
		{internedPacket(3, []iname{{7, "gamma"}, {2, "beta2"}}, nil, 7), Ok,
			map[uint64]string{1: "alpha", 2: "beta2", 7: "gamma"}, map[uint64]string{1: "cat"}},
		// Only categories; iid 1 of categories is independent of names.
		{internedPacket(4, nil, []iname{{2, "cat2"}, {1, "cat1"}}, 0), Ok,
			map[uint64]string{1: "alpha", 2: "beta2", 7: "gamma"}, map[uint64]string{1: "cat1", 2: "cat2"}},
		// The same iid twice in one packet: the later entry wins.
		{internedPacket(5, []iname{{1, "one"}, {1, "uno"}}, nil, 1), Ok,
			map[uint64]string{1: "uno", 2: "beta2", 7: "gamma"}, map[uint64]string{1: "cat1", 2: "cat2"}},
		// interned_data present but empty: Ok, nothing changes.
		{msg(8, 6, 12, []byte{}), Ok,
			map[uint64]string{1: "uno", 2: "beta2", 7: "gamma"}, map[uint64]string{1: "cat1", 2: "cat2"}},
		// A large iid (keys are matched on 32 bits, values kept whole).
		{internedPacket(7, []iname{{1 << 20, "big"}}, nil, 0), Ok,
			map[uint64]string{1: "uno", 2: "beta2", 7: "gamma", 1 << 20: "big"}, map[uint64]string{1: "cat1", 2: "cat2"}},
	}
	var states [][]byte
	for i, s := range steps {
		before := vm.SerializeIncrementalState(nil)
		st := vm.ApplyPatch(s.pkt)
		if st.Code != s.code {
			t.Fatalf("step %d: %v, want %v", i, st, s.code)
		}
		state := vm.SerializeIncrementalState(nil)
		if s.code != Ok && !bytes.Equal(before, state) {
			t.Fatalf("step %d: state changed by a failing patch", i)
		}
		names, cats := internedEntries(t, state, true)
		if !maps.Equal(names, s.names) || !maps.Equal(cats, s.cats) {
			t.Fatalf("step %d: state names %v cats %v, want %v %v", i, names, cats, s.names, s.cats)
		}
		states = append(states, state)
	}

	// The state is itself a valid patch that re-applies idempotently (what
	// README.md "Streaming" relies on): folding it into a fresh VM gives
	// the same state, folding it into its own VM changes nothing.
	final := states[len(states)-1]
	fresh := newVM(t, prog, 64*1024)
	if st := fresh.ApplyPatch(final); !st.IsOk() || !bytes.Equal(fresh.SerializeIncrementalState(nil), final) {
		t.Fatalf("state as a patch on a fresh VM: %v, %x", st, fresh.SerializeIncrementalState(nil))
	}
	if st := vm.ApplyPatch(final); !st.IsOk() || !bytes.Equal(vm.SerializeIncrementalState(nil), final) {
		t.Fatalf("state as a patch on its own VM: %v", st)
	}

	// Trace processor side (§7.1): a VM re-created from an emitted state
	// folds the following packets to the same result as the original VM.
	for k := range states {
		tp, ok, err := NewWithState(prog, 64*1024, states[k])
		if err != nil || !ok {
			t.Fatalf("NewWithState after step %d: ok %v err %v", k, ok, err)
		}
		for _, s := range steps[k+1:] {
			tp.ApplyPatch(s.pkt)
		}
		if got := tp.SerializeIncrementalState(nil); !bytes.Equal(got, states[len(states)-1]) {
			t.Fatalf("replay from state %d: %x, want %x", k, got, states[len(states)-1])
		}
	}
}

// TestProtoVMInternedNamesMany folds many packets into a small memory
// limit: the state has exactly one entry per iid however often the iids
// are redefined.
func TestProtoVMInternedNamesMany(t *testing.T) {
	prog, err := Compile(internedNamesYAML(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	vm := newVM(t, prog, 64*1024)
	want := map[uint64]string{}
	for k := uint64(1); k <= 2000; k++ {
		iid := k%50 + 1
		name := fmt.Sprintf("n%d", k)
		want[iid] = name
		if st := vm.ApplyPatch(internedPacket(k, []iname{{iid, name}}, nil, iid)); !st.IsOk() {
			t.Fatalf("packet %d: %v", k, st)
		}
	}
	names, _ := internedEntries(t, vm.SerializeIncrementalState(nil), true)
	if !maps.Equal(names, want) {
		t.Fatalf("names %v, want %v", slices.Sorted(maps.Keys(names)), slices.Sorted(maps.Keys(want)))
	}
	if vm.Stats().MemoryLimitHits != 0 {
		t.Fatal("memory limit hit: redefinitions leak memory")
	}
}
