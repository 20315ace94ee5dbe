package pipeline

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// syntheticPlugin builds plugins/internal/syntheticplugin (the built-in
// synthetic source served as a plugin) once per test binary.
func syntheticPlugin(b testing.TB) string { return buildPlugin(b, "plugins/internal/syntheticplugin") }

// BenchmarkPluginVsInProcess runs the same data source (tracepipe.synthetic,
// one writer, 1 KiB packets, unthrottled, stall policy) in process and as a
// plugin, into a file sink on tmpfs. b.N is the packet count (use
// -benchtime Nx with N <= 400000). The run must be lossless (the stall
// policy makes the writer wait instead of dropping): any overwrite, SMB
// drop, writer loss or sink drop fails it. The ring buffer is sized to hold
// the whole run: an unthrottled producer outruns the file sink, and the
// service applies no backpressure from the ring to producers (a wrapping
// ring overwrites, by design; BenchmarkEndToEnd rate=max shows it).
// fileGB/s is what reached the file; inGB/s what the producer wrote into
// the buffer. Targets: the plugin at >= 85 % of in-process and >= 1 GB/s.
func BenchmarkPluginVsInProcess(b *testing.B) {
	for _, c := range []struct {
		name   string
		plugin bool
	}{{"inprocess", false}, {"plugin", true}} {
		b.Run(c.name, func(b *testing.B) {
			plugin := ""
			if c.plugin {
				plugin = fmt.Sprintf("    plugin: %q\n", syntheticPlugin(b))
			}
			out := filepath.Join(benchDir(b, false), "bench.pftrace")
			cfg := loadYAML(b, fmt.Sprintf(`
write_into_file: true
file_write_period: 100ms
buffers: [{size_kb: 524288}]
producers: {smb_size_kb: 4096, smb_page_size_kb: 4}
data_sources:
  - name: tracepipe.synthetic
%s    buffer_exhausted_policy: stall
    config: {writers: 1, rate: 0, packet_size: 1024, max_packets: %d, names: 1024}
sinks: [{type: file, path: %q}]
`, plugin, b.N, out))
			if b.N > 400_000 {
				b.Fatalf("b.N = %d packets would wrap the 512 MiB buffer: use -benchtime Nx with N <= 400000", b.N)
			}
			s, err := New(cfg, Options{})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			b.SetBytes(1024)
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
			bs := res.Stats.BufferStats[0]
			tp := res.Stats.Tracepipe
			lost := bs.ChunksOverwritten + bs.ChunksDiscarded + bs.TraceWriterPacketLoss + tp.ProducerPacketsDropped + tp.SinkPacketsDropped + tp.SMBChunksRejected
			if lost != 0 {
				b.Fatalf("lossy under the stall policy: buffer %+v tracepipe %+v", bs, tp)
			}
			b.ReportMetric(float64(tp.SinkBytesWritten)/elapsed.Seconds()/1e9, "fileGB/s")
			b.ReportMetric(float64(bs.BytesWritten)/elapsed.Seconds()/1e9, "inGB/s")
		})
	}
}
