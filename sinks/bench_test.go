package sinks

import (
	"path/filepath"
	"strconv"
	"testing"

	"github.com/tracepipe/tracepipe/tracefile"
)

// BenchmarkFileSink measures Write of one packet per call into a real file
// (periodic fsync off, so the write path alone is measured).
func BenchmarkFileSink(b *testing.B) {
	cases := []struct {
		name string
		size int
		comp string
	}{
		{"64B", 64, ""},
		{"1KiB", 1 << 10, ""},
		{"64KiB", 64 << 10, ""},
		{"1KiB-zstd", 1 << 10, CompressionZstd},
		{"1KiB-gzip", 1 << 10, CompressionGzip},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			s, err := NewFile(FileOptions{Path: filepath.Join(b.TempDir(), "bench"), Compression: c.comp, FsyncPeriod: -1})
			if err != nil {
				b.Fatal(err)
			}
			pkt := mkPacket(2, 1, tracefile.FieldTrackEvent, c.size)
			pkt = pkt[:c.size] // exactly c.size bytes; contents do not matter to the sink
			for i := range pkt {
				pkt[i] = byte(i * 31 >> 3) // some redundancy for the compressors
			}
			batch := [][]byte{pkt}
			b.SetBytes(int64(len(pkt)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := s.Write(bg, batch); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.Flush(bg); err != nil { // hand everything to the OS inside the timing
				b.Fatal(err)
			}
			b.StopTimer()
			if err := s.Close(bg); err != nil { // end of stream and fsync: not per-packet costs
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkQueuedWrite measures the caller's side of a queue (copy and
// hand-off) in front of a sink that discards. When the caller outruns the
// worker, batches are dropped (cheaply): the drops/op metric says how
// often, so MB/s must be read together with it.
func BenchmarkQueuedWrite(b *testing.B) {
	for _, n := range []int{16, 256} {
		b.Run(strconv.Itoa(n)+"x1KiB", func(b *testing.B) {
			q := Queued(discardSink{}, 64)
			defer q.Close(bg)
			batch := make([][]byte, n)
			for i := range batch {
				batch[i] = make([]byte, 1<<10)
			}
			b.SetBytes(int64(n << 10))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_ = q.Write(bg, batch) // a full queue drops; both paths are the caller's cost
			}
			b.StopTimer()
			b.ReportMetric(float64(q.Stats().PacketsDroppedQueue)/float64(n)/float64(b.N), "drops/op")
		})
	}
}

// BenchmarkFilterMatch measures one CEL evaluation on an encoded packet.
func BenchmarkFilterMatch(b *testing.B) {
	f, err := NewFilter(`packet.kind == "track_event" && packet.sequence_id != 3`)
	if err != nil {
		b.Fatal(err)
	}
	pkt := mkPacket(2, 1, tracefile.FieldTrackEvent, 100)
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if ok, err := f.Match(pkt); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
