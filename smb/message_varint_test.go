package smb

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// TestPutVarint10 checks the writer's varint encoders (putVarint10, and
// AppendVarint's varintWord/putVarintWord) against protowire at every
// length boundary and on random values, and that they leave the bytes
// after the varint as they were (the golden SMB keeps the stale bytes
// compaction leaves there).
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
		if v < 1<<7 || v >= 1<<56 {
			continue // AppendVarint's own one-byte case, or its slow path
		}
		var c [9]byte // one byte past the 8 putVarintWord may use
		for i := range c {
			c[i] = 0x5A
		}
		x, n := varintWord(v)
		putVarintWord((*[8]byte)(c[:8]), x, n)
		if !bytes.Equal(c[:n], want) {
			t.Fatalf("varintWord/putVarintWord(%#x) = % x, want % x", v, c[:n], want)
		}
		for i := n; i < len(c); i++ {
			if c[i] != 0x5A {
				t.Fatalf("varintWord/putVarintWord(%#x) changed byte %d after the varint: % x", v, i, c)
			}
		}
	}
}

// TestMessageFieldsMatchProtowire writes packets through the message API
// (root fields, then fields in one nested message left open at Finish:
// the TrackEvent shape) with values at every varint length boundary,
// tags of one, two and three bytes and nested messages of up to ~150
// bytes, and requires each reassembled packet to equal protowire's
// encoding of the same fields (a nested size over 127 bytes stays the
// 4-byte redundant varint reserved for it, as in Perfetto).
func TestMessageFieldsMatchProtowire(t *testing.T) {
	rg := newCompactRig(t)
	var vals []uint64
	for s := range 64 {
		v := uint64(1) << s
		vals = append(vals, v-1, v)
	}
	vals = append(vals, ^uint64(0))
	fields := []uint32{1, 15, 16, 2047, 2048, 70000}
	// The first packet of a sequence carries first_packet_on_sequence.
	if err := rg.w.WritePacket([]byte{8, 1}); err != nil {
		t.Fatal(err)
	}
	var want [][]byte
	for i, v := range vals {
		f := fields[i%len(fields)]
		g := fields[(i+1)%len(fields)]
		s := strings.Repeat("x", i%130)
		p := rg.w.NewTracePacket()
		p.AppendVarint(f, v)
		n := p.BeginNested(g)
		n.AppendVarint(g, v>>(i%7))
		n.AppendString(f, s)
		n.AppendVarint(f, v)
		if err := p.Finish(); err != nil {
			t.Fatal(err)
		}
		if err := rg.w.Flush(); err != nil { // one packet a chunk: none spans chunks
			t.Fatal(err)
		}
		var in []byte
		in = protowire.AppendTag(in, protowire.Number(g), protowire.VarintType)
		in = protowire.AppendVarint(in, v>>(i%7))
		in = protowire.AppendTag(in, protowire.Number(f), protowire.BytesType)
		in = protowire.AppendString(in, s)
		in = protowire.AppendTag(in, protowire.Number(f), protowire.VarintType)
		in = protowire.AppendVarint(in, v)
		var pk []byte
		pk = protowire.AppendTag(pk, protowire.Number(f), protowire.VarintType)
		pk = protowire.AppendVarint(pk, v)
		pk = protowire.AppendTag(pk, protowire.Number(g), protowire.BytesType)
		if len(in) <= 127 {
			pk = protowire.AppendBytes(pk, in)
		} else { // a nested size over 127 keeps its reserved 4 bytes
			var size [4]byte
			PutRedundantVarint(size[:], uint32(len(in)))
			pk = append(append(pk, size[:]...), in...)
		}
		want = append(want, pk)
	}
	if rg.rej() != 0 {
		t.Fatal("the reader rejected chunks")
	}
	if len(rg.packets) != 1+len(want) {
		t.Fatalf("%d packets, want %d", len(rg.packets), 1+len(want))
	}
	rg.packets = rg.packets[1:]
	for i := range want {
		if !bytes.Equal(rg.packets[i], want[i]) {
			t.Fatalf("packet %d (value %#x):\n got % x\nwant % x", i, vals[i], rg.packets[i], want[i])
		}
	}
}
