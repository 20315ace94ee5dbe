package pipeline

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/config"
)

// rssBytes reads VmRSS of this process.
func rssBytes() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmRSS:")); ok {
			kb, _ := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(v, []byte("kB")))), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// BenchmarkSnapshot takes snapshots of a full ring (64 and 256 MiB) of a
// running session fed by the synthetic source as fast as it goes, and
// reports the service's longest pause in processing commits during a
// snapshot (pause-ms, target <= 50 ms at 256 MiB), the peak RSS above the
// session's before the snapshot, relative to the buffer (peak-extra-x,
// target <= 1: total <= 2x buffer), the RSS after (after-extra-x, back
// near 0), and the snapshot's write rate to a file on tmpfs (MB/s).
func BenchmarkSnapshot(b *testing.B) {
	for _, mib := range []int{64, 256} {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			dir, err := os.MkdirTemp("/dev/shm", "snapbench")
			if err != nil {
				b.Skip("no tmpfs at /dev/shm")
			}
			defer os.RemoveAll(dir)
			cfg, err := config.Load(config.LoadOptions{Path: filepath.Join("..", "configs", "ring_buffer.yaml"), Sets: []string{
				"duration=10m", fmt.Sprintf("buffers[0].size_kb=%d", mib<<10), "data_sources[0].config.rate=0",
				"sinks[0].path=" + filepath.Join(dir, "live.pftrace"),
			}})
			if err != nil {
				b.Fatal(err)
			}
			cfg.DataSources = cfg.DataSources[:1]
			s, err := New(cfg, Options{})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { _, _ = s.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			for s.Status().BytesIn < uint64(mib)<<20+uint64(mib)<<18 { // full, and wrapped
				time.Sleep(20 * time.Millisecond)
			}
			size := float64(int64(mib) << 20)
			var pauses, peaks, afters, rates []float64
			for i := 0; b.Loop(); i++ {
				base := rssBytes()
				var peak atomic.Int64
				stopSampling := make(chan struct{})
				sampled := make(chan struct{})
				go func() {
					defer close(sampled)
					t := time.NewTicker(2 * time.Millisecond)
					defer t.Stop()
					for {
						peak.Store(max(peak.Load(), rssBytes()))
						select {
						case <-stopSampling:
							return
						case <-t.C:
						}
					}
				}()
				t0 := time.Now()
				r := <-s.Snapshot(SnapshotRequest{Trigger: "bench", Path: filepath.Join(dir, fmt.Sprintf("s%d.pftrace", i))})
				el := time.Since(t0)
				close(stopSampling)
				<-sampled
				if r.Err != nil {
					b.Fatal(r.Err)
				}
				pauses = append(pauses, float64(r.Pause)/1e6)
				peaks = append(peaks, float64(peak.Load()-base)/size)
				afters = append(afters, float64(rssBytes()-base)/size)
				rates = append(rates, float64(r.Bytes)/el.Seconds()/1e6)
				_ = os.Remove(r.Files[0])
			}
			b.ReportMetric(median(pauses), "pause-ms")
			b.ReportMetric(median(peaks), "peak-extra-x")
			b.ReportMetric(median(afters), "after-extra-x")
			b.ReportMetric(median(rates), "MB/s")
		})
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	c := slices.Clone(v)
	slices.Sort(c)
	return c[len(c)/2]
}

// BenchmarkSnapshotsUnderLoad: a 256 MiB ring session fed by the
// synthetic source (4 writers x 512 B at SNAPLOAD_RATE packets/s each,
// default 97000: ~200 MB/s; drop policy, so loss is counted, not
// stalled) takes one snapshot per iteration, 2 s apart (-benchtime 30x:
// a 60 s run). It reports the producers' input rate (in-MB/s), the
// producer packets lost to a full SMB (lost-pkts, target 0) and the
// longest snapshot pause. SNAPLOAD_BASELINE=1 runs the same load without
// snapshots: the loss the machine causes anyway.
func BenchmarkSnapshotsUnderLoad(b *testing.B) {
	dir, err := os.MkdirTemp("/dev/shm", "snapload")
	if err != nil {
		b.Skip("no tmpfs at /dev/shm")
	}
	defer os.RemoveAll(dir)
	cfg, err := config.Load(config.LoadOptions{Path: filepath.Join("..", "configs", "ring_buffer.yaml"), Sets: []string{
		"duration=1h", "buffers[0].size_kb=262144", "data_sources[0].config.rate=" + cmp.Or(os.Getenv("SNAPLOAD_RATE"), "97000"), "data_sources[0].buffer_exhausted_policy=drop",
		"producers.smb_size_kb=32768", // as configs/flight_recorder.yaml: ~160 ms of SMB at 200 MB/s (tools/snapload)
		"sinks[0].path=" + filepath.Join(dir, "live.pftrace"),
	}})
	if err != nil {
		b.Fatal(err)
	}
	cfg.DataSources = cfg.DataSources[:1]
	s, err := New(cfg, Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *Result, 1)
	go func() { r, _ := s.Run(ctx); done <- r }()
	t0 := time.Now()
	in0 := s.Status().BytesIn
	for i := 0; b.Loop(); i++ {
		time.Sleep(2 * time.Second)
		if os.Getenv("SNAPLOAD_BASELINE") != "" {
			continue // the same load without snapshots: the loss the machine causes anyway
		}
		r := <-s.Snapshot(SnapshotRequest{Trigger: "load", Path: filepath.Join(dir, fmt.Sprintf("s%d.pftrace", i))})
		if r.Err != nil {
			b.Fatal(r.Err)
		}
		_ = os.Remove(r.Files[0])
	}
	el := time.Since(t0)
	in := s.Status().BytesIn - in0
	cancel()
	res := <-done
	b.ReportMetric(float64(in)/el.Seconds()/1e6, "in-MB/s")
	b.ReportMetric(float64(res.Stats.Tracepipe.ProducerPacketsDropped), "lost-pkts")
	b.ReportMetric(float64(res.Snapshots.MaxPause)/1e6, "max-pause-ms")
}
