package protovm

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

func TestTopLevelSrcFields(t *testing.T) {
	for _, c := range []struct {
		src  string
		want []uint32
		ok   bool
	}{
		{"commands:\n  - merge: {src: [12, \"2[]\"], dst: [12, 2], key_field: 1}\n  - set: {src: [59], dst: [59]}\n  - merge: {src: [\"60[]\"], dst: [60], key_field: 1}\n  - merge: {src: [12, \"1[]\"], dst: [12, 1], key_field: 1}\n", []uint32{12, 59, 60}, true},
		{"commands:\n  - set: {src: [], dst: [900]}\n", nil, false},                                             // empty SRC path: runs on every packet
		{"instructions:\n  - select: {cursor: DST, path: [1]}\n", nil, false},                                   // DST first
		{"instructions:\n  - reg_load: {register: 0}\n", nil, false},                                            // not a select
		{"instructions:\n  - select: {cursor: SRC, path: [11]}\n    nested: [{set: {}}]\n", []uint32{11}, true}, // explicit SRC
	} {
		prog, err := CompileProgram([]byte(c.src), nil)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := prog.TopLevelSrcFields()
		if ok != c.ok || !slices.Equal(got, c.want) {
			t.Errorf("%q: %v %v, want %v %v", c.src, got, ok, c.want, c.ok)
		}
	}
}

// The claim TopLevelSrcFields makes: a patch without any of the fields
// leaves the state unchanged. Checked on random patches against a VM that
// already holds state.
func TestTopLevelSrcFieldsSkipIsExact(t *testing.T) {
	src := "commands:\n  - merge: {src: [12, \"2[]\"], dst: [12, 2], key_field: 1}\n    abort_level: SKIP_CURRENT_COMMAND\n  - set: {src: [59], dst: [59]}\n    abort_level: SKIP_CURRENT_COMMAND\n  - merge: {src: [\"60[]\"], dst: [60], key_field: 1}\n"
	prog, err := CompileProgram([]byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	fields, ok := prog.TopLevelSrcFields()
	if !ok {
		t.Fatal("not prefilterable")
	}
	vm, err := New(prog.Marshal(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var seed []byte
	seed = protowire.AppendTag(seed, 12, protowire.BytesType)
	seed = protowire.AppendBytes(seed, []byte{0x12, 0x05, 0x08, 0x01, 0x12, 0x01, 'a'})
	if st := vm.ApplyPatch(seed); st.Code == Abort {
		t.Fatal(st)
	}
	before := vm.SerializeIncrementalState(nil)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		var p []byte
		for range rng.IntN(6) {
			num := protowire.Number(rng.IntN(130) + 1)
			if slices.Contains(fields, uint32(num)) {
				continue
			}
			if rng.IntN(2) == 0 {
				p = protowire.AppendVarint(protowire.AppendTag(p, num, protowire.VarintType), rng.Uint64())
			} else {
				b := make([]byte, rng.IntN(8))
				for k := range b {
					b[k] = byte(rng.IntN(256))
				}
				p = protowire.AppendBytes(protowire.AppendTag(p, num, protowire.BytesType), b)
			}
		}
		vm.ApplyPatch(p)
		if after := vm.SerializeIncrementalState(nil); !bytes.Equal(after, before) {
			t.Fatalf("patch % x without fields %v changed the state", p, fields)
		}
	}
}
