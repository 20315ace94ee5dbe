package smb

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// TestPutVarint10 checks the writer's varint encoder against protowire at
// every length boundary and on random values, and that it leaves the
// bytes after the varint as they were (the golden SMB keeps the stale
// bytes compaction leaves there).
func TestPutVarint10(t *testing.T) {
	var vals []uint64
	for s := range 64 {
		v := uint64(1) << s
		vals = append(vals, v-1, v, v+1)
	}
	vals = append(vals, ^uint64(0), ^uint64(0)-1)
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		vals = append(vals, r.Uint64()>>r.IntN(64))
	}
	for _, v := range vals {
		var b [10]byte
		for i := range b {
			b[i] = 0xA5
		}
		n := putVarint10(&b, v)
		want := protowire.AppendVarint(nil, v)
		if !bytes.Equal(b[:n], want) {
			t.Fatalf("putVarint10(%#x) = % x, want % x", v, b[:n], want)
		}
		for i := n; i < len(b); i++ {
			if b[i] != 0xA5 {
				t.Fatalf("putVarint10(%#x) changed byte %d after the varint: % x", v, i, b)
			}
		}
		if v >= 1<<56 {
			continue
		}
		var c [9]byte // one byte past the 8 putVarint56 may use
		for i := range c {
			c[i] = 0x5A
		}
		n = putVarint56((*[8]byte)(c[:8]), v)
		if !bytes.Equal(c[:n], want) {
			t.Fatalf("putVarint56(%#x) = % x, want % x", v, c[:n], want)
		}
		for i := n; i < len(c); i++ {
			if c[i] != 0x5A {
				t.Fatalf("putVarint56(%#x) changed byte %d after the varint: % x", v, i, c)
			}
		}
	}
}
