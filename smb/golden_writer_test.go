package smb

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
)

// pattern is the README's Pattern(n, base, seed).
func pattern(n int, base byte, seed int) string {
	b := make([]byte, n)
	for k := range b {
		b[k] = base + byte((k+seed)%26)
	}
	return string(b)
}

// writeGoldenA writes the README's writer-A packet i with NewTracePacket.
func writeGoldenA(w *TraceWriter, i int) {
	p := w.NewTracePacket()
	p.AppendVarint(8, uint64(1000+10*i))
	ft := p.BeginNested(900)
	ft.AppendVarint(2, uint64(i))
	if i != 6 {
		ft.AppendString(1, fmt.Sprintf("writer A small packet #%d", i))
		ft.AppendVarint(3, uint64(100+i))
	} else {
		ft.AppendString(1, "writer A big packet")
		pl := ft.BeginNested(5)
		pl.AppendVarint(3, 1)
		for k := range 19 {
			pl.AppendString(1, pattern(512, 'A', k))
		}
		n := pl.BeginNested(2)
		n.AppendVarint(3, 0)
		n.AppendString(4, pattern(400, 'a', 7))
		n.AppendVarint(5, 42)
		for v := 1; v <= 10; v++ {
			n.AppendVarint(6, uint64(v))
		}
		n.End()
		pl.End()
		ft.AppendBool(4, false)
	}
	ft.End()
	p.Finish()
}

func writeGoldenB(w *TraceWriter, i int) {
	p := w.NewTracePacket()
	p.AppendVarint(8, uint64(2000+10*i))
	ft := p.BeginNested(900)
	ft.AppendVarint(2, uint64(i))
	ft.AppendString(1, fmt.Sprintf("writer B packet #%d", i))
	pl := ft.BeginNested(5)
	pl.AppendString(4, pattern(960, 'a', i))
	pl.AppendVarint(5, uint64(i))
	p.Finish() // closes payload and for_testing
}

// TestGoldenWriterReproducesSMB drives Arbiter + TraceWriter with the
// README's configuration and write sequence and compares the SMB before
// and after the flushes and the commits byte for byte.
func TestGoldenWriterReproducesSMB(t *testing.T) {
	for _, set := range goldenSets {
		t.Run("set="+set.sub, func(t *testing.T) {
			dir := goldenDir(t, set.sub)
			s, err := NewHeapSMB(65536, 4096)
			if err != nil {
				t.Fatal(err)
			}
			var commits []byte
			arb, err := NewArbiter(s, ArbiterOptions{Layout: set.layout, Commit: CommitBatched,
				OnCommit: func(cd *CommitData) {
					rec := cd.AppendMarshal(nil)
					commits = binary.LittleEndian.AppendUint32(commits, uint32(len(rec)))
					commits = append(commits, rec...)
				}})
			if err != nil {
				t.Fatal(err)
			}
			a, _ := arb.NewTraceWriter(1, Stall)
			b, _ := arb.NewTraceWriter(1, Stall)
			if a.ID() != 1 || b.ID() != 2 {
				t.Fatalf("writer ids %d, %d; want 1, 2", a.ID(), b.ID())
			}
			seq := []struct {
				w *TraceWriter
				i int
			}{{a, 1}, {a, 2}, {b, 1}, {a, 3}, {a, 4}, {b, 2}, {a, 5}, {a, 6}, {b, 3}, {a, 7}, {a, 8}, {b, 4}, {a, 9}}
			for _, st := range seq {
				if st.w == a {
					writeGoldenA(a, st.i)
				} else {
					writeGoldenB(b, st.i)
				}
				arb.FlushPendingCommits() // the harness drains the task queue
			}
			compareSMB(t, "smb_preflush.bin", s.Bytes(), readGolden(t, dir, "smb_preflush.bin"))
			if err := a.Flush(); err != nil {
				t.Fatal(err)
			}
			arb.FlushPendingCommits()
			if err := b.Flush(); err != nil {
				t.Fatal(err)
			}
			arb.FlushPendingCommits()
			compareSMB(t, "smb.bin", s.Bytes(), readGolden(t, dir, "smb.bin"))
			if want := readGolden(t, dir, "commits.bin"); !bytes.Equal(commits, want) {
				t.Errorf("commits.bin differs:\n got % x\nwant % x", commits, want)
			}
		})
	}
}

func compareSMB(t *testing.T, name string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	n := 0
	for i := range want {
		if got[i] != want[i] {
			if n < 10 {
				t.Errorf("%s: byte %#x (page %d, offset %d): got %02x want %02x", name, i, i/4096, i%4096, got[i], want[i])
			}
			n++
		}
	}
	t.Errorf("%s: %d bytes differ", name, n)
}
