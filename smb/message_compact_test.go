package smb

import (
	"bytes"
	"strings"
	"testing"
)

// compactRig is a writer on its own SMB whose commits are read and freed
// inline, recording every packet the reader reassembles.
type compactRig struct {
	s       *SMB
	w       *TraceWriter
	packets [][]byte
	rej     func() uint64
}

func newCompactRig(t *testing.T) *compactRig {
	t.Helper()
	s, err := NewHeapSMB(16*4096, 4096)
	if err != nil {
		t.Fatal(err)
	}
	rg := &compactRig{s: s}
	r := NewReader(s)
	arb, err := NewArbiter(s, ArbiterOptions{OnCommit: func(cd *CommitData) {
		r.ReadCommit(cd, func(v *ChunkView) {
			b := v.Payload
			for range v.Fragments {
				size, n := consumeTestVarint(b)
				if size > 0 {
					rg.packets = append(rg.packets, append([]byte(nil), b[n:n+size]...))
				}
				b = b[n+size:]
			}
		}, nil)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if rg.w, err = arb.NewTraceWriter(1, Stall); err != nil {
		t.Fatal(err)
	}
	rg.rej = func() uint64 { return r.Stats().TotalRejected() }
	return rg
}

func consumeTestVarint(b []byte) (int, int) {
	v, n := 0, 0
	for s := 0; ; s += 7 {
		c := b[n]
		n++
		v |= int(c&0x7f) << s
		if c < 0x80 {
			return v, n
		}
	}
}

// TestFinishWithOpenNestedMatchesEnd writes the same packets twice: once
// finishing with the nested message still open (the one-move compaction
// of compactLastNested when the packet qualifies) and once closing it with
// End first (endFrame, then finishPacket: two moves). The two SMBs must be
// equal byte for byte, including the stale bytes compaction leaves after
// the last packet of a chunk, across nested sizes 0..140, prefixes of 0..20
// bytes and packets that span chunks.
func TestFinishWithOpenNestedMatchesEnd(t *testing.T) {
	fast, ref := newCompactRig(t), newCompactRig(t)
	write := func(w *TraceWriter, prefix, nested int, end bool) {
		p := w.NewTracePacket()
		if prefix > 0 {
			p.AppendBytes(1, []byte(strings.Repeat("p", prefix-2)))
		}
		m := p.BeginNested(11)
		if nested > 0 {
			s := make([]byte, nested-2)
			for i := range s {
				s[i] = byte(nested + i)
			}
			m.AppendBytes(2, s)
		}
		if end {
			m.End()
		}
		if err := p.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	step := 0
	for prefix := 0; prefix <= 20; prefix += 5 {
		for nested := 0; nested <= 140; nested++ {
			if nested == 1 || prefix == 1 {
				continue
			}
			write(fast.w, prefix, nested, false)
			write(ref.w, prefix, nested, true)
			step++
			if step%7 == 0 { // chunks returned with stale tails at many offsets
				fast.w.Flush()
				ref.w.Flush()
			}
			if !bytes.Equal(fast.s.Bytes(), ref.s.Bytes()) {
				t.Fatalf("prefix %d, nested %d: the SMBs differ", prefix, nested)
			}
		}
	}
	fast.w.Flush()
	ref.w.Flush()
	if !bytes.Equal(fast.s.Bytes(), ref.s.Bytes()) {
		t.Fatal("the SMBs differ after the last flush")
	}
	if len(fast.packets) != step || len(ref.packets) != step {
		t.Fatalf("read %d and %d packets, want %d", len(fast.packets), len(ref.packets), step)
	}
	for i := range fast.packets {
		if !bytes.Equal(fast.packets[i], ref.packets[i]) {
			t.Fatalf("packet %d differs: % x vs % x", i, fast.packets[i], ref.packets[i])
		}
	}
	if fast.rej() != 0 || ref.rej() != 0 {
		t.Fatal("the reader rejected chunks")
	}
}
