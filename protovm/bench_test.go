package protovm

import (
	"testing"
)

// BenchmarkProtoVM measures ApplyPatch in steady state on the reference
// sample programs.
func BenchmarkProtoVM(b *testing.B) {
	// Small merge patches cycling over 16 keys of IncrementalTraceInstructions.
	var patches [][]byte
	for k := 0; k < 16; k++ {
		e := appendTag(nil, 1, wireVarint)
		e = appendVarint(e, uint64(k))
		e = appendTag(e, 2, wireVarint)
		e = appendVarint(e, uint64(1000+k))
		patches = append(patches, appendLen(2, e))
	}
	b.Run("ApplyPatch", func(b *testing.B) {
		v := newVM(b, incrementalProgram, tenMiB)
		for _, p := range patches {
			v.ApplyPatch(p)
		}
		b.SetBytes(int64(len(patches[0])))
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if st := v.ApplyPatch(patches[i&15]); !st.IsOk() {
				b.Fatal(st)
			}
		}
	})
	b.Run("ApplyPatchSet", func(b *testing.B) {
		v := newVM(b, incrementalProgram, tenMiB)
		var sets [][]byte
		for _, p := range patches {
			s := append([]byte{}, p...)
			s[0] = 0x1a // elements_to_set
			sets = append(sets, s)
			v.ApplyPatch(s)
		}
		b.SetBytes(int64(len(sets[0])))
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if st := v.ApplyPatch(sets[i&15]); !st.IsOk() {
				b.Fatal(st)
			}
		}
	})
	b.Run("ServiceProgram", func(b *testing.B) {
		v := newVM(b, serviceProgram, 16*1024)
		p := hx("a2 38 06 32 04 0a 02 70 31")
		v.ApplyPatch(p)
		b.SetBytes(int64(len(p)))
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if st := v.ApplyPatch(p); st.Code != Error {
				b.Fatal(st)
			}
		}
	})
	// Instances.Observe as the buffer's overwrite observer calls it:
	// fragmented small packets through the interned-names program.
	b.Run("ObserveOverwrite", benchObserveOverwrite)
	b.Run("Serialize", func(b *testing.B) {
		v := newVM(b, incrementalProgram, tenMiB)
		for _, p := range patches {
			v.ApplyPatch(p)
		}
		buf := v.SerializeIncrementalState(nil)
		b.SetBytes(int64(len(buf)))
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			buf = v.SerializeIncrementalState(buf[:0])
		}
	})
}
