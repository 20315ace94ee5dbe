package pipeline

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
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
//
// Both variants start with the ring's pages already faulted in, so that
// they measure the same steady state: a 512 MiB ring fresh from the OS
// faults every page in on the service goroutine during its first fill,
// which costs more than the copy itself (CopyChunkUntrusted: ~1 s of CPU
// per 400 MB cold, ~0.04 s warm, on a loaded 2-core machine). Without
// prewarmHeap the variant whose 512 MiB happened to be reused from the Go
// heap had its pages faulted in by New's zeroing, outside the timer, and
// the other did not: in-process was measured warm and the plugin cold,
// which was most of the "plugin gap" of earlier runs. svc-cpu-s/GB and
// plugin-cpu-s/GB are the CPU the service and the plugin process spent
// per GB of packets.
//
// The plugin is built before either variant runs: a go build (a second of
// compiling and linking that frees hundreds of MB) right before the
// plugin's runs only would be paid by them alone. Both variants get the
// same 4 MiB SMB (smb_size_kb for the in-process source,
// plugin_smb_size_kb for the plugin, whose default it is).
func BenchmarkPluginVsInProcess(b *testing.B) {
	pluginPath := syntheticPlugin(b)
	for _, c := range []struct {
		name   string
		plugin bool
	}{{"inprocess", false}, {"plugin", true}} {
		b.Run(c.name, func(b *testing.B) {
			plugin := ""
			if c.plugin {
				plugin = fmt.Sprintf("    plugin: %q\n", pluginPath)
			}
			out := filepath.Join(testsupport.BenchDir(b, false), "bench.pftrace")
			cfg := cfgtest.LoadYAML(b, fmt.Sprintf(`
write_into_file: true
file_write_period: 100ms
buffers: [{size_kb: 524288}]
producers: {smb_size_kb: 4096, plugin_smb_size_kb: 4096, smb_page_size_kb: 4}
data_sources:
  - name: tracepipe.synthetic
%s    buffer_exhausted_policy: stall
    config: {writers: 1, rate: 0, packet_size: 1024, max_packets: %d, names: 1024}
sinks: [{type: file, path: %q}]
`, plugin, b.N, out))
			if b.N > 400_000 {
				b.Fatalf("b.N = %d packets would wrap the 512 MiB buffer: use -benchtime Nx with N <= 400000", b.N)
			}
			prewarmHeap(512 << 20)
			s, err := New(cfg, Options{})
			if err != nil {
				b.Fatal(err)
			}
			self0, children0 := rusage(b, syscall.RUSAGE_SELF), rusage(b, syscall.RUSAGE_CHILDREN)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			b.SetBytes(1024)
			b.ResetTimer()
			start := time.Now()
			res, err := s.Run(ctx)
			elapsed := time.Since(start)
			b.StopTimer()
			// The plugin process was reaped by the end of Run.
			self, children := rusage(b, syscall.RUSAGE_SELF)-self0, rusage(b, syscall.RUSAGE_CHILDREN)-children0
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
			gb := float64(tp.SinkBytesWritten) / 1e9
			b.ReportMetric(self.Seconds()/gb, "svc-cpu-s/GB")
			b.ReportMetric(children.Seconds()/gb, "plugin-cpu-s/GB")
		})
	}
}

// rusage is the user+system CPU time of this process (RUSAGE_SELF) or of
// its reaped children (RUSAGE_CHILDREN).
func rusage(b *testing.B, who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// prewarmHeap leaves n bytes of touched memory free in the Go heap, so
// that the next allocation of that size reuses it and New's zeroing
// faults its pages in before the timer starts.
func prewarmHeap(n int) {
	// The previous run's ring is garbage by now: collect it first, so that
	// m reuses its memory instead of growing the heap by another n bytes
	// (growth past the runtime's goal makes it return memory to the OS
	// eagerly, ~500 MB at once, which then faults back in).
	runtime.GC()
	m := make([]byte, n)
	for i := 0; i < len(m); i += 4096 {
		m[i] = 1
	}
	m = nil
	runtime.GC()
}
