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
		max  int64
	}{
		{"64B", 64, "", 0},
		{"1KiB", 1 << 10, "", 0},
		{"64KiB", 64 << 10, "", 0},
		{"1KiB-zstd", 1 << 10, CompressionZstd, 0},
		{"1KiB-gzip", 1 << 10, CompressionGzip, 0},
		// Rotating: every packet goes through the restore fold.
		{"1KiB-rotating", 1 << 10, "", 64 << 20},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			s, err := NewFile(FileOptions{Path: filepath.Join(b.TempDir(), "bench"), Compression: c.comp, FsyncPeriod: -1, MaxFileSize: c.max})
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

// BenchmarkLaneOffer measures the fan-out's side of a lane (hand-off of a
// shared item, no copy) in front of a sink that discards, with when_full:
// drop. When the caller outruns the lane, items are dropped (cheaply): the
// drops/op metric says how often, so MB/s must be read together with it.
func BenchmarkLaneOffer(b *testing.B) {
	for _, n := range []int{16, 256} {
		b.Run(strconv.Itoa(n)+"x1KiB", func(b *testing.B) {
			l := NewLane(discardSink{}, LaneConfig{Capacity: 64})
			defer l.Close(bg)
			it := &Item{}
			for range n {
				it.Packets = append(it.Packets, make([]byte, 1<<10))
			}
			b.SetBytes(int64(n << 10))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				it.Hold(1)
				l.Offer(bg, it) // a full queue drops; both paths are the caller's cost
			}
			b.StopTimer()
			b.ReportMetric(float64(l.Stats().PacketsDroppedQueue)/float64(n)/float64(b.N), "drops/op")
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
