package pipeline

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
)

// cpuTime is the process's user+system CPU time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEndToEnd measures a whole in-process session: the synthetic
// source writes b.N TrackEvent packets of ~1 KiB through its SMB at a
// fixed total rate, the service copies them into a 64 MiB ring buffer,
// reads them back, stamps them, and the file sink streams them out. The
// run must be lossless — no overwrite, no SMB drop, no sink drop — or the
// benchmark fails: a rate is "sustained" only if nothing is lost at it.
// MB/s counts packet bytes written to the file; packets/s and CPU seconds
// per GB of packets are reported too. rate=max runs the producers
// unthrottled and reports what gets through and what was lost (a sink
// slower than the producers makes the ring buffer wrap, by design: the
// "disk" case shows this machine's disk as that sink).
func BenchmarkEndToEnd(b *testing.B) {
	cases := []struct {
		name     string
		writers  int
		rate     int // packets/s per writer, 0 = unthrottled
		disk     bool
		lossless bool
	}{
		{"1KiB/rate=1GBps/tmpfs", 2, 500_000, false, true},
		{"1KiB/rate=1.5GBps/tmpfs", 2, 750_000, false, true},
		{"1KiB/rate=max/tmpfs", 2, 0, false, false},
		{"1KiB/rate=max/disk", 2, 0, true, false},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			perWriter := (b.N + c.writers - 1) / c.writers
			out := filepath.Join(testsupport.BenchDir(b, c.disk), "bench.pftrace")
			cfg := cfgtest.LoadYAML(b, fmt.Sprintf(`
write_into_file: true
file_write_period: 100ms
buffers: [{size_kb: 65536}]
producers: {smb_size_kb: 4096, smb_page_size_kb: 4}
data_sources:
  - name: tracepipe.synthetic
    buffer_exhausted_policy: stall
    config: {writers: %d, rate: %d, packet_size: 1024, max_packets: %d, names: 1024}
sinks: [{type: file, path: %q}]
`, c.writers, c.rate, perWriter, out))
			s, err := New(cfg, Options{})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			b.SetBytes(1024)
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			b.ResetTimer()
			start := time.Now()
			res, err := s.Run(ctx)
			elapsed := time.Since(start)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if ctx.Err() != nil {
				b.Fatal("session did not end within 5 minutes")
			}
			cpu := cpuTime(b) - cpu0
			bs := res.Stats.BufferStats[0]
			tp := res.Stats.Tracepipe
			lost := bs.ChunksOverwritten + bs.ChunksDiscarded + tp.ProducerPacketsDropped + tp.SinkPacketsDropped
			b.Logf("elapsed %v lost %d overwritten %d deferred %d file %d", elapsed, lost, bs.BytesOverwritten, tp.ReadbackDeferred, tp.SinkBytesWritten)
			if c.lossless && lost != 0 {
				b.Fatalf("lossy at this rate: buffer %+v tracepipe %+v", bs, tp)
			}
			if !c.lossless {
				b.ReportMetric(float64(lost), "lost-chunks+packets")
			}
			b.ReportMetric(float64(tp.SinkPacketsWritten)/elapsed.Seconds(), "packets/s")
			b.ReportMetric(float64(tp.SinkBytesWritten)/elapsed.Seconds()/1e6, "fileMB/s")
			if res.Bytes > 0 {
				b.ReportMetric(cpu.Seconds()/(float64(res.Bytes)/1e9), "cpu-s/GB")
			}
		})
	}
}
