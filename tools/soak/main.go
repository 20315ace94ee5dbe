// Command soak runs tracepipe's long-trace soak (issue 10): a streaming
// session at a target rate with zstd rotation, sampled every 10 s for RSS,
// goroutines and open file descriptors into a CSV, then checked:
//
//   - RSS flat: the mean of the last third of the run (the last 10 minutes
//     of the 30-minute run) within 10 % of the mean of its second sixth
//     (minutes 5–10);
//   - zero loss: no data-loss counter in the final TraceStats, no packet
//     dropped by the sink;
//   - every rotated file opens alone: it reads to its end and ends with a
//     TraceStats (what `tracepipe stats FILE` needs to exit 0);
//   - the set holds every packet exactly once: each synthetic sequence's
//     seq annotations are 0, 1, ..., k-1 across the files, each once.
//
// It is not part of `make test` (it runs for minutes): `make soak` runs
// the full 30 minutes, `make soak SOAK_DURATION=3m` a short one. It owns no
// library code: it drives the pipeline as `tracepipe run` does.
package main

import (
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/sinks/celfilter"

	"github.com/tracepipe/tracepipe/transport/goplugin"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/pipeline"
	"github.com/tracepipe/tracepipe/plugins/builtin"
	"github.com/tracepipe/tracepipe/tracefile"
)

// Its configs may filter sinks (sinks.UseFilterCompiler).
func init() { sinks.UseFilterCompiler(celfilter.Compile) }

func main() {
	duration := flag.Duration("duration", 30*time.Minute, "session length")
	rate := flag.Float64("rate", 20, "target MB/s of synthetic packets (4 writers)")
	rotate := flag.String("rotate", "64MiB", "max_file_size (bytes on disk, zstd)")
	dir := flag.String("out", "", "output directory (default: a new temporary directory)")
	period := flag.Duration("sample", 10*time.Second, "sampling period of RSS, goroutines and fds")
	flag.Parse()
	if err := run(*duration, *rate, *rotate, *dir, *period); err != nil {
		fmt.Fprintln(os.Stderr, "soak: FAIL:", err)
		os.Exit(1)
	}
	fmt.Println("soak: PASS")
}

// sample is one row of the CSV.
type sample struct {
	at         time.Duration
	rss        int64
	goroutines int
	fds        int
	bytesOut   uint64
	packets    uint64
}

func run(duration time.Duration, mbps float64, rotate, dir string, period time.Duration) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "tracepipe-soak-")
		if err != nil {
			return err
		}
		dir = d
	}
	const writers, packetSize = 4, 1024
	perWriter := int(mbps * 1e6 / packetSize / writers)
	out := filepath.Join(dir, "soak.pftrace.zst")
	cfgText := fmt.Sprintf(`
duration: %s
write_into_file: true
file_write_period: 1s
buffers:
  - {name: main, size_kb: 131072}
  - {name: process, size_kb: 8192}
producers: {smb_size_kb: 8192}
data_sources:
  - name: tracepipe.synthetic
    target_buffer_name: main
    buffer_exhausted_policy: stall
    config: {writers: %d, rate: %d, packet_size: %d}
  - name: linux.process_stats
    target_buffer_name: process
  - name: linux.sys_stats
    target_buffer_name: process
    config: {meminfo_period_ms: 1000, vmstat_period_ms: 1000, stat_period_ms: 1000}
sinks:
  - type: file
    file: {path: %s, max_file_size: %s}
`, duration, writers, perWriter, packetSize, out, rotate)
	cfgPath := filepath.Join(dir, "soak.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o644); err != nil {
		return err
	}
	cfg, err := config.Load(config.LoadOptions{Path: cfgPath})
	if err != nil {
		return err
	}
	svc, err := pipeline.New(cfg, pipeline.Options{Plugins: goplugin.Host{}, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)).With("program", "soak")})
	if err != nil {
		return err
	}
	fmt.Printf("soak: %v at %.0f MB/s (%d writers × %d packets/s × %d B), rotation %s zstd, output %s\n",
		duration, mbps, writers, perWriter, packetSize, rotate, dir)

	var samples []sample
	start := time.Now()
	take := func() {
		st := svc.Status()
		samples = append(samples, sample{at: time.Since(start), rss: rssBytes(), goroutines: runtime.NumGoroutine(),
			fds: openFDs(), bytesOut: st.BytesOut, packets: st.Packets})
	}
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(period)
		defer t.Stop()
		take()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				take()
			}
		}
	}()
	res, runErr := svc.Run(context.Background())
	close(done)
	<-sampled
	if runErr != nil {
		return runErr
	}
	csvPath := filepath.Join(dir, "soak.csv")
	if err := writeCSV(csvPath, samples); err != nil {
		return err
	}

	var fails []string
	fail := func(format string, args ...any) { fails = append(fails, fmt.Sprintf(format, args...)) }

	// RSS flat.
	early, late := meanRSS(samples, duration/6, duration/3), meanRSS(samples, duration*2/3, duration+time.Minute)
	if early == 0 || late == 0 {
		fail("too few samples to judge RSS (%d)", len(samples))
	} else if d := float64(late-early) / float64(early); d > 0.10 || d < -0.10 {
		fail("RSS not flat: %.1f MiB in [%v, %v], %.1f MiB in the last third (%+.1f%%)", mib(early), duration/6, duration/3, mib(late), 100*d)
	}
	// Zero loss.
	for _, r := range tracefile.LossReport(res.Stats) {
		if r.Lost() {
			fail("loss: %s = %d", r.Name, r.Value)
		}
	}
	sk := res.Sinks[0]
	if sk.Stats.PacketsDropped() != 0 || sk.Err != nil {
		fail("sink: %d packets dropped, error %v", sk.Stats.PacketsDropped(), sk.Err)
	}
	// Every file alone, and the set exactly once.
	next := map[uint32]uint64{}
	var setPackets, synth int
	for _, f := range sk.Files {
		n, err := checkFile(f, next, &synth)
		setPackets += n
		if err != nil {
			fail("%s: %v", f, err)
		}
	}
	var rssStart, rssEnd int64
	if len(samples) > 0 {
		rssStart, rssEnd = samples[0].rss, samples[len(samples)-1].rss
	}
	fmt.Printf("soak: summary: RSS start %.1f MiB, end %.1f MiB (minutes-5-10-equivalent mean %.1f, last-third mean %.1f); "+
		"%d files, %d packets in the set (%d synthetic on %d sequences), sink wrote %d packets (%.1f MiB before compression); loss: %s; csv %s\n",
		mib(rssStart), mib(rssEnd), mib(early), mib(late), len(sk.Files), setPackets, synth, len(next),
		sk.Stats.PacketsWritten, float64(sk.Stats.BytesWritten)/(1<<20), lossWord(len(fails) == 0), csvPath)
	if len(fails) > 0 {
		return errors.New(strings.Join(fails, "; "))
	}
	return nil
}

func lossWord(ok bool) string {
	if ok {
		return "none"
	}
	return "see failures"
}

// checkFile reads one rotated file alone: it must read to its end and end
// with a TraceStats; synthetic packets continue each sequence's prefix.
func checkFile(path string, next map[uint32]uint64, synth *int) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	r, err := tracefile.NewReader(f)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	n := 0
	lastIsStats := false
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, err
		}
		n++
		info, err := tracefile.DecodePacket(rec.Packet)
		if err != nil {
			return n, fmt.Errorf("packet %d: %w", n, err)
		}
		lastIsStats = info.PayloadField == tracefile.FieldTraceStats
		if seq, ok := builtin.SyntheticSeq(rec.Packet); ok {
			if seq != next[info.SequenceID] {
				return n, fmt.Errorf("sequence %d: seq %d, want %d (a gap or a duplicate)", info.SequenceID, seq, next[info.SequenceID])
			}
			next[info.SequenceID]++
			*synth++
		}
	}
	if !lastIsStats {
		return n, errors.New("does not end with a TraceStats")
	}
	return n, nil
}

func meanRSS(s []sample, from, to time.Duration) int64 {
	var sum, n int64
	for _, x := range s {
		if x.at >= from && x.at < to {
			sum += x.rss
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / n
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func writeCSV(path string, samples []sample) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"seconds", "rss_bytes", "goroutines", "open_fds", "bytes_out", "packets_out"})
	for _, s := range samples {
		_ = w.Write([]string{strconv.FormatFloat(s.at.Seconds(), 'f', 1, 64), strconv.FormatInt(s.rss, 10),
			strconv.Itoa(s.goroutines), strconv.Itoa(s.fds), strconv.FormatUint(s.bytesOut, 10), strconv.FormatUint(s.packets, 10)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// rssBytes reads VmRSS from /proc/self/status.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}
