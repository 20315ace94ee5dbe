package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/internal/testsupport"
)

// buildTracepipe builds the real binary (testsupport.BuildBinary: no -race).
func buildTracepipe(tb testing.TB) string { return testsupport.BuildBinary(tb, ".") }

// memPeak is what peakRSS measured of one run.
type memPeak struct {
	RSS int64 // VmHWM: the measure
	// Anon and File split the resident set as it was when VmHWM last grew
	// (read within 10 ms of it): anonymous memory (buffers, heap, stacks)
	// and file-backed pages (the binary's code and tables, mapped by its
	// package initialisers, the runtime and the kernel's fault-around).
	Anon, File int64
	Written    int64 // bytes in out
}

// peakRSS runs `tracepipe run cfg` until out holds at least minBytes (or
// the session's own duration ends), stops it with SIGINT and returns its
// peak resident set (VmHWM, read every 10 ms until it exits), its split
// and the bytes written. The waits are bounded by deadline. Not
// ru_maxrss: Linux folds the forking process's high-water mark into the
// child's at exec, and a race-instrumented test binary is larger than
// what is measured.
func peakRSS(tb testing.TB, bin, cfg, out string, minBytes int64, deadline time.Duration, env []string, sets ...string) (m memPeak) {
	tb.Helper()
	args := []string{"run", cfg}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stop := time.Now().Add(deadline)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	signalled := false
	for {
		select {
		case err := <-done:
			if err != nil {
				tb.Fatalf("tracepipe run: %v\n%s", err, stderr.String())
			}
			st, err := os.Stat(out)
			if err != nil {
				tb.Fatalf("tracepipe run left no output: %v\n%s", err, stderr.String())
			}
			if m.RSS == 0 {
				tb.Fatal("tracepipe run exited before its VmHWM was read")
			}
			m.Written = st.Size()
			return m
		case <-tick.C:
			if hwm := testsupport.VmHWM(cmd.Process.Pid); hwm > m.RSS {
				m.RSS = hwm
				if anon, rss, ok := testsupport.ResidentSplit(cmd.Process.Pid); ok {
					m.Anon, m.File = anon, rss-anon
				}
			}
			if signalled {
				continue
			}
			if st, err := os.Stat(out); err == nil && st.Size() >= minBytes {
				_ = cmd.Process.Signal(os.Interrupt)
				signalled = true
			} else if time.Now().After(stop) {
				_ = cmd.Process.Kill()
				<-done
				tb.Fatalf("tracepipe run wrote less than %d bytes in %v\n%s", minBytes, deadline, stderr.String())
			}
		}
	}
}

// memConfig is a streaming session into out: one ring of ringMiB, one
// synthetic producer (one SMB of the default 256 KiB) with two writers.
func memConfig(ringMiB int, rate, packetSize int, out string) string {
	return fmt.Sprintf(`duration: 60s
write_into_file: true
file_write_period: 100ms
buffers:
  - name: ring
    size_kb: %d
    fill_policy: ring_buffer
data_sources:
  - name: tracepipe.synthetic
    config:
      writers: 2
      rate: %d
      packet_size: %d
sinks:
  - type: file
    path: %s
`, ringMiB*1024, rate, packetSize, out)
}

// The regression guard of issue 27: a session's peak RSS stays within its
// buffers and SMBs plus a generous margin. Before the buffers moved off
// the Go heap this session peaked at about 2.3× its 64 MiB ring (150 MB),
// over this bound; now it is about 100 MiB: 76 MiB anonymous (the ring,
// then 12 MiB of heap, stacks and runtime) and 24 MiB of the binary's
// own pages. The tight figure (buffers + SMBs + 16 MiB) is
// BenchmarkRunPeakRSS's.
func TestRunPeakRSSWithinBuffers(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "mem.pftrace")
	cfg := filepath.Join(dir, "mem.yaml")
	const ringMiB = 64
	if err := os.WriteFile(cfg, []byte(memConfig(ringMiB, 0, 1000, out)), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := buildTracepipe(t)
	// Twice the ring through the buffer: every page of it was written.
	m := peakRSS(t, bin, cfg, out, 2*ringMiB<<20, 5*time.Minute, nil)
	rss, written := m.RSS, m.Written
	const budget = ringMiB<<20 + 256<<10
	t.Logf("peak RSS %.1f MiB (%.1f MiB anonymous, %.1f MiB file-backed) for %.1f MiB of buffers and SMBs (%.0f MiB written)",
		float64(rss)/(1<<20), float64(m.Anon)/(1<<20), float64(m.File)/(1<<20), float64(budget)/(1<<20), float64(written)/(1<<20))
	if written < 2*ringMiB<<20 {
		t.Fatalf("only %d bytes written: the ring was not filled, the measure means nothing", written)
	}
	if limit := int64(budget + 64<<20); rss > limit {
		t.Fatalf("peak RSS %d bytes > buffers + SMBs + 64 MiB = %d", rss, limit)
	}
}

// BenchmarkRunPeakRSS runs issue 27's native workload (one 64 MiB ring,
// two synthetic writers at 100 MB/s each, streaming every 100 ms) and
// reports the peak RSS and how far it is above buffers + SMBs (the target
// is 16 MiB). Run it with -benchtime 1x; the figures are per run.
func BenchmarkRunPeakRSS(b *testing.B) {
	bin := buildTracepipe(b)
	dir := b.TempDir()
	for _, tc := range []struct {
		name  string
		limit string // GOMEMLIMIT, "" = the session's own HeapBudget
	}{{"budget", ""}, {"GOMEMLIMIT=100MiB", "100MiB"}} {
		b.Run(tc.name, func(b *testing.B) {
			out := filepath.Join(dir, "mem.pftrace")
			cfg := filepath.Join(dir, "mem.yaml")
			if err := os.WriteFile(cfg, []byte(memConfig(64, 100000, 1000, out)), 0o644); err != nil {
				b.Fatal(err)
			}
			var env []string
			if tc.limit != "" {
				env = append(env, "GOMEMLIMIT="+tc.limit)
			}
			var peak, over, anonOver, file float64
			for b.Loop() {
				_ = os.Remove(out)
				m := peakRSS(b, bin, cfg, out, 1<<30, 5*time.Minute, env)
				if float64(m.RSS)/(1<<20) > peak {
					peak = float64(m.RSS) / (1 << 20)
					over = float64(m.RSS-(64<<20+256<<10)) / (1 << 20)
					anonOver = float64(m.Anon-(64<<20+256<<10)) / (1 << 20)
					file = float64(m.File) / (1 << 20)
				}
			}
			b.ReportMetric(peak, "peak-RSS-MiB")
			b.ReportMetric(over, "MiB-over-buffers+SMBs")
			b.ReportMetric(anonOver, "anon-MiB-over-buffers+SMBs")
			b.ReportMetric(file, "file-backed-MiB")
		})
	}
}

// BenchmarkExampleConfigsPeakRSS runs each example config for 5 s (its
// sinks writing into a temporary directory) and reports its peak RSS and
// how far that is above its buffers + SMBs (SMBs as configured: plugin
// data sources get plugin_smb_size_kb). Run it with -benchtime 1x.
func BenchmarkExampleConfigsPeakRSS(b *testing.B) {
	bin := buildTracepipe(b)
	paths, err := filepath.Glob(filepath.Join("..", "..", "configs", "*.yaml"))
	if err != nil || len(paths) == 0 {
		b.Fatalf("no example configs: %v", err)
	}
	for _, path := range paths {
		b.Run(strings.TrimSuffix(filepath.Base(path), ".yaml"), func(b *testing.B) {
			dir := b.TempDir()
			sets := []string{"duration=5s"}
			cfg, err := config.Load(config.LoadOptions{Path: path, Sets: sets})
			if err != nil {
				b.Fatal(err)
			}
			var budget int64
			for _, bc := range cfg.Buffers {
				budget += int64(bc.SizeKB) << 10
			}
			for _, dc := range cfg.DataSources {
				if dc.Plugin != "" {
					budget += int64(cfg.Producers.PluginSMBSizeKB) << 10
				} else {
					budget += int64(cfg.Producers.SMBSizeKB) << 10
				}
			}
			out := filepath.Join(dir, "0.pftrace")
			for i := range cfg.Sinks {
				sets = append(sets, fmt.Sprintf("sinks[%d].path=%s", i, filepath.Join(dir, fmt.Sprintf("%d.pftrace", i))))
			}
			peak, over := 0.0, math.Inf(-1) // a config may stay below its buffers + SMBs
			var anonOver, file float64
			for b.Loop() {
				m := peakRSS(b, bin, path, out, 1<<40, 2*time.Minute, nil, sets...)
				if float64(m.RSS)/(1<<20) > peak {
					peak = float64(m.RSS) / (1 << 20)
					over = float64(m.RSS-budget) / (1 << 20)
					anonOver = float64(m.Anon-budget) / (1 << 20)
					file = float64(m.File) / (1 << 20)
				}
			}
			b.ReportMetric(float64(budget)/(1<<20), "buffers+SMBs-MiB")
			b.ReportMetric(peak, "peak-RSS-MiB")
			b.ReportMetric(over, "MiB-over-buffers+SMBs")
			b.ReportMetric(anonOver, "anon-MiB-over-buffers+SMBs")
			b.ReportMetric(file, "file-backed-MiB")
		})
	}
}
