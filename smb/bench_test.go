package smb

import (
	"testing"
)

// benchWriter returns a writer on a default-sized SMB (256 KiB, 4 KiB Div1
// pages) whose commits are read and freed inline by a Reader, as the
// service would. The SMB is a private one, as an in-process data
// source's.
func benchWriter(tb testing.TB) (*TraceWriter, *Reader) {
	s, err := NewPrivateSMB(DefaultShmSize, DefaultPageSize)
	if err != nil {
		tb.Fatal(err)
	}
	r := NewReader(s)
	arb, err := NewArbiter(s, ArbiterOptions{OnCommit: func(cd *CommitData) { r.ReadCommit(cd, nil, nil) }})
	if err != nil {
		tb.Fatal(err)
	}
	w, err := arb.NewTraceWriter(1, Stall)
	if err != nil {
		tb.Fatal(err)
	}
	return w, r
}

func BenchmarkTraceWriter(b *testing.B) {
	for _, c := range []struct {
		name string
		size int
	}{{"64B", 64}, {"4KiB", 4096}} {
		b.Run(c.name, func(b *testing.B) {
			w, r := benchWriter(b)
			p := make([]byte, c.size)
			for i := range p {
				p[i] = byte(i)
			}
			w.WritePacket(p)
			b.SetBytes(int64(c.size))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := w.WritePacket(p); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			w.Flush()
			if r.Stats().TotalRejected() != 0 {
				b.Fatal("reader rejected chunks")
			}
		})
	}
}

// BenchmarkTraceWriterNested writes a packet field by field with one
// nested message, as an in-process instrumentation point would.
func BenchmarkTraceWriterNested(b *testing.B) {
	w, _ := benchWriter(b)
	name := "slice name"
	b.SetBytes(32)
	b.ReportAllocs()
	for i := range b.N {
		p := w.NewTracePacket()
		p.AppendVarint(8, uint64(i))
		ev := p.BeginNested(11)
		ev.AppendVarint(9, 1)
		ev.AppendString(23, name)
		ev.AppendVarint(11, 42)
		p.Finish()
	}
}

func TestWriterSteadyStateAllocs(t *testing.T) {
	w, _ := benchWriter(t)
	small, big, huge := make([]byte, 64), make([]byte, 4096), make([]byte, 100_000)
	for range 3 { // warm up: garbage-free buffers and commit slices reach their size
		w.WritePacket(small)
		w.WritePacket(big)
		w.WritePacket(huge)
	}
	for name, f := range map[string]func(){
		"WritePacket64B":   func() { w.WritePacket(small) },
		"WritePacket4KiB":  func() { w.WritePacket(big) },
		"WritePacket100KB": func() { w.WritePacket(huge) },
		"NewTracePacketNested": func() {
			p := w.NewTracePacket()
			p.AppendVarint(8, 1)
			n := p.BeginNested(11)
			n.AppendString(23, "name")
			n.BeginNested(2).AppendBytes(1, big)
			p.Finish()
		},
	} {
		if a := testing.AllocsPerRun(200, f); a != 0 {
			t.Errorf("%s: %v allocs per packet in steady state", name, a)
		}
	}
}
