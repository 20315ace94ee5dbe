// Command snapload runs the flight recorder's load acceptance (issue 16):
// a ring-buffer session fed at a target rate by the synthetic source
// (configs/flight_recorder.yaml: 4 writers, ProtoVM restore path, its
// 32 MiB SMB, here a 256 MiB ring and the drop policy, so that a full SMB is
// counted as loss instead of slowing the writers down) takes a snapshot
// every -every while it runs, and reports what was lost and where: producer packets dropped for a full
// SMB, chunks the buffer discarded, overwrites (expected in a ring), the
// snapshots taken and their longest pause. It exits 1 if producers lost
// anything (the target: zero producer loss).
//
// It is not part of `make test` (it runs for a minute at full load):
// `make snapload` runs the acceptance (60 s, 200 MB/s, a snapshot every
// 2 s); -every 0 runs the same load without snapshots.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/sinks/celfilter"

	"github.com/tracepipe/tracepipe/transport/goplugin"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/pipeline"
	_ "github.com/tracepipe/tracepipe/plugins/builtin" // the synthetic source
)

// Its configs may filter sinks (sinks.UseFilterCompiler).
func init() { sinks.UseFilterCompiler(celfilter.Compile) }

func main() {
	duration := flag.Duration("duration", 60*time.Second, "session length")
	rate := flag.Float64("rate", 200, "target MB/s of synthetic packets (4 writers of 512-byte packets)")
	every := flag.Duration("every", 2*time.Second, "snapshot period (0: none, the baseline)")
	bufMiB := flag.Int("buffer", 256, "ring buffer size, MiB")
	smbKiB := flag.Int("smb", 0, "producers.smb_size_kb (0: the config's)")
	configPath := flag.String("config", "configs/flight_recorder.yaml", "session config (its first data source must be the synthetic one)")
	out := flag.String("out", "", "directory for the live trace and snapshots (default: a new one under /dev/shm or the temp dir)")
	flag.Parse()
	if err := run(*duration, *rate, *every, *bufMiB, *smbKiB, *configPath, *out); err != nil {
		fmt.Fprintln(os.Stderr, "snapload: FAIL:", err)
		os.Exit(1)
	}
	fmt.Println("snapload: PASS")
}

func run(duration time.Duration, rate float64, every time.Duration, bufMiB, smbKiB int, configPath, dir string) error {
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("/dev/shm", "snapload"); err != nil {
			if dir, err = os.MkdirTemp("", "snapload"); err != nil {
				return err
			}
		}
		defer os.RemoveAll(dir)
	}
	perWriter := int(rate * 1e6 / 4 / 512)
	sets := []string{
		"duration=1h", fmt.Sprintf("buffers[0].size_kb=%d", bufMiB<<10),
		fmt.Sprintf("data_sources[0].config.rate=%d", perWriter), "data_sources[0].buffer_exhausted_policy=drop",
		"sinks[0].path=" + filepath.Join(dir, "live.pftrace"), "sinks[0].compression=none",
	}
	if smbKiB > 0 {
		sets = append(sets, fmt.Sprintf("producers.smb_size_kb=%d", smbKiB))
	}
	cfg, err := config.Load(config.LoadOptions{Path: configPath, Sets: sets})
	if err != nil {
		return err
	}
	cfg.DataSources = cfg.DataSources[:1] // the synthetic source alone
	s, err := pipeline.New(cfg, pipeline.Options{Plugins: goplugin.Host{}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan *pipeline.Result, 1)
	errc := make(chan error, 1)
	go func() {
		r, err := s.Run(ctx)
		errc <- err
		done <- r
	}()
	t0 := time.Now()
	var snaps, failed int
	var tick <-chan time.Time
	if every > 0 {
		tk := time.NewTicker(every)
		defer tk.Stop()
		tick = tk.C
	}
	end := time.After(duration)
	lastLost := uint64(0)
	report := time.NewTicker(10 * time.Second)
	defer report.Stop()
loop:
	for {
		select {
		case <-end:
			break loop
		case <-report.C:
			st := s.Status()
			lost := st.Stats.Tracepipe.ProducerPacketsDropped
			fmt.Printf("%5.0fs in %6.0f MB/s, producer packets lost %d (+%d), chunks discarded %d\n",
				time.Since(t0).Seconds(), float64(st.BytesIn)/time.Since(t0).Seconds()/1e6, lost, lost-lastLost, st.Stats.ChunksDiscarded)
			lastLost = lost
		case <-tick:
			n := snaps + failed + 1
			r := <-s.Snapshot(pipeline.SnapshotRequest{Trigger: "load", Path: filepath.Join(dir, fmt.Sprintf("s%d.pftrace", n))})
			if r.Err != nil {
				failed++
				fmt.Fprintf(os.Stderr, "snapshot %d: %v\n", n, r.Err)
				continue
			}
			snaps++
			_ = os.Remove(r.Files[0])
		}
	}
	el := time.Since(t0)
	in := s.Status().BytesIn
	cancel()
	if err := <-errc; err != nil {
		return err
	}
	res := <-done
	ts := res.Stats
	tp := ts.Tracepipe
	fmt.Printf("duration %v, input %.0f MB/s (target %.0f), snapshots %d taken, %d failed, longest pause %v\n",
		el.Round(time.Millisecond), float64(in)/el.Seconds()/1e6, rate, snaps, failed, res.Snapshots.MaxPause)
	fmt.Printf("producer packets lost (SMB full) %d, chunks discarded %d, patches discarded %d, SMB chunks rejected %d, readback deferred %d\n",
		tp.ProducerPacketsDropped, ts.ChunksDiscarded, ts.PatchesDiscarded, tp.SMBChunksRejected, tp.ReadbackDeferred)
	for i, b := range ts.BufferStats {
		fmt.Printf("buffer %d: chunks written %d, overwritten %d, discarded %d, abi violations %d\n",
			i, b.ChunksWritten, b.ChunksOverwritten, b.ChunksDiscarded, b.AbiViolations)
	}
	if tp.ProducerPacketsDropped != 0 || ts.ChunksDiscarded != 0 {
		return fmt.Errorf("producers lost %d packets, %d chunks were discarded", tp.ProducerPacketsDropped, ts.ChunksDiscarded)
	}
	if failed != 0 {
		return fmt.Errorf("%d snapshots failed", failed)
	}
	return nil
}
