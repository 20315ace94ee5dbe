package protovm

import (
	"bytes"
	"flag"
	"math/rand"
	"sort"
	"testing"
)

var long = flag.Bool("long", false, "run long randomized tests")

// elem is the reference model of one Element: field id → varint value.
type elem map[uint32]uint64

func encodeElem(e elem) []byte {
	ids := make([]int, 0, len(e))
	for id := range e {
		ids = append(ids, int(id))
	}
	sort.Ints(ids)
	var b []byte
	for _, id := range ids {
		b = appendTag(b, uint32(id), wireVarint)
		b = appendVarint(b, e[uint32(id)])
	}
	return b
}

// TestProtoVMLastValueWinsProperty applies random delete/merge/set patches
// one by one with IncrementalTraceInstructions and checks the state against
// a map-by-key model: set replaces the element, merge overwrites the fields
// it carries (last write wins), delete removes the key.
func TestProtoVMLastValueWinsProperty(t *testing.T) {
	runs := 200
	if *long {
		runs = 20000
	}
	for seed := int64(0); seed < int64(runs); seed++ {
		rng := rand.New(rand.NewSource(seed))
		v := newVM(t, incrementalProgram, tenMiB)
		model := map[uint32]elem{}
		fieldExists := false
		for step := 0; step < 30; step++ {
			var patch []byte
			var dels []uint32
			var merges, sets []elem
			for i := rng.Intn(4); i > 0; i-- {
				k := uint32(rng.Intn(8))
				dels = append(dels, k)
				patch = appendTag(patch, 1, wireVarint)
				patch = appendVarint(patch, uint64(k))
			}
			for i := rng.Intn(3); i > 0; i-- {
				e := elem{1: uint64(rng.Intn(8))}
				if rng.Intn(3) > 0 {
					e[2] = uint64(rng.Intn(1000))
				}
				merges = append(merges, e)
				patch = append(patch, appendLen(2, encodeElem(e))...)
			}
			for i := rng.Intn(3); i > 0; i-- {
				e := elem{1: uint64(rng.Intn(8))}
				if rng.Intn(3) > 0 {
					e[2] = uint64(rng.Intn(1000))
				}
				sets = append(sets, e)
				patch = append(patch, appendLen(3, encodeElem(e))...)
			}
			st := v.ApplyPatch(patch)
			// Model: deletes first (an absent repeated field breaks the
			// whole program with Error), then merges, then sets.
			wantCode := Ok
			if len(dels) > 0 && !fieldExists {
				wantCode = Error
			} else {
				for _, k := range dels {
					delete(model, k)
				}
				for _, e := range merges {
					cur := model[uint32(e[1])]
					if cur == nil {
						cur = elem{}
						model[uint32(e[1])] = cur
					}
					for f, x := range e {
						cur[f] = x
					}
					fieldExists = true
				}
				for _, e := range sets {
					c := elem{}
					for f, x := range e {
						c[f] = x
					}
					model[uint32(e[1])] = c
					fieldExists = true
				}
			}
			if st.Code != wantCode {
				t.Fatalf("seed %d step %d: patch %x status %v, want %v", seed, step, patch, st, wantCode)
			}
			keys := make([]int, 0, len(model))
			for k := range model {
				keys = append(keys, int(k))
			}
			sort.Ints(keys)
			var want []byte
			for _, k := range keys {
				want = append(want, appendLen(1, encodeElem(model[uint32(k)]))...)
			}
			if got := v.SerializeIncrementalState(nil); !bytes.Equal(got, want) {
				t.Fatalf("seed %d step %d: patch %x\n got %x\nwant %x", seed, step, patch, got, want)
			}
		}
	}
}
