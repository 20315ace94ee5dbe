package protovm

import (
	"bytes"
	"testing"
)

// FuzzProtoVM runs arbitrary programs on arbitrary patches: no panic, the
// memory limit holds, the state serialises, and a clone matches.
func FuzzProtoVM(f *testing.F) {
	f.Add(incrementalProgram, patchInitialState, patchDel, uint16(1024))
	f.Add(incrementalProgram, patchMerge1, patchMerge2, uint16(300))
	f.Add(serviceProgram, hx("a2 38 06 32 04 0a 02 70 31"), []byte{}, uint16(4096))
	f.Add(hx("12 02 1a 00"), traceEntryTwoElems, patchInconsistent, uint16(500))
	f.Add(hx("12 08 0a 02 08 02 3a 02 2a 00"), patchInitialState, patchSet, uint16(100))
	f.Fuzz(func(t *testing.T, prog, p1, p2 []byte, limit uint16) {
		v, err := New(prog, int(limit))
		if err != nil {
			return
		}
		for _, p := range [][]byte{p1, p2, p1} {
			st := v.ApplyPatch(p)
			if st.Code > Abort {
				t.Fatalf("bad code %v", st.Code)
			}
			if used := v.MemoryUsage() - len(prog); used < 0 || used > int(limit) {
				t.Fatalf("memory %d outside limit %d", used, limit)
			}
			s := v.SerializeIncrementalState(nil)
			c := v.CloneReadOnly()
			if !bytes.Equal(c.SerializeIncrementalState(nil), s) {
				t.Fatal("clone differs")
			}
		}
	})
}

// FuzzParseProgram: no panic; an accepted program re-encodes to bytes that
// parse to the same encoding.
func FuzzParseProgram(f *testing.F) {
	f.Add(incrementalProgram)
	f.Add(serviceProgram)
	f.Add(hx("12 02 1a 00"))
	f.Add(hx("12 04 0a 02 08 02 12 03 0a 01 12"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseProgram(b)
		if err != nil {
			return
		}
		enc := p.Marshal()
		q, err := ParseProgram(enc)
		if err != nil {
			t.Fatalf("re-encoded program rejected: %v", err)
		}
		if !bytes.Equal(q.Marshal(), enc) {
			t.Fatal("encoding not stable")
		}
	})
}
