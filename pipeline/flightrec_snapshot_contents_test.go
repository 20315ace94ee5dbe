package pipeline

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/tpimport"
)

// startSession runs a session until stop, which ends it and returns its
// result (the test fails if Run fails).
func startSession(t *testing.T, cfg *config.Config, opts Options) (*Service, func() *Result) {
	t.Helper()
	s, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan *Result, 1)
	go func() {
		res, err := s.Run(ctx)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	var res *Result
	var once sync.Once
	return s, func() *Result {
		once.Do(func() {
			cancel()
			res = <-done
			if res == nil {
				t.Fatal("the session returned no result")
			}
		})
		return res
	}
}

// checkImports asserts tracepipe check finds a trace clean: no packet
// skipped for missing incremental state, no problem but SMB loss.
func checkImports(t *testing.T, what, path string) {
	t.Helper()
	rep, err := tpimport.CheckFile(path, tpimport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var skipped int64
	for _, q := range rep.Sequences {
		skipped += q.NeedsSkipped
	}
	if skipped != 0 || len(rep.Codes()) != 0 && !onlySMBLoss(rep) {
		var sb strings.Builder
		_ = rep.WriteText(&sb)
		t.Fatalf("%s (%s): tracepipe check: %d packets skipped\n%s", what, path, skipped, sb.String())
	}
}

// transfer_on_clone hands the buffer to the snapshot; the live session's
// sequences go on in an empty buffer, and their next packets still
// import: the live trace gets a restore with each sequence's state as of
// the transfer (the moved packets folded), even though no sequence clears
// its incremental state again (clear_period 0). A second transfer's
// snapshot, which holds only what came after the first, imports too.
func TestTransferOnCloneKeepsLiveTraceImportable(t *testing.T) {
	s, _, stop := snapshotSession(t, "buffers[0].size_kb=16384", "buffers[0].transfer_on_clone=true",
		"incremental_state.clear_period=0s", "data_sources[0].config.writers=2")
	testsupport.WaitUntil(t, "half a second of recording", 20*time.Second, func() bool { return s.Status().Elapsed >= 500*time.Millisecond })
	var snaps []string
	for range 2 {
		r := <-s.Snapshot(SnapshotRequest{Trigger: "moved"})
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		snaps = append(snaps, r.Files[0])
		in := s.Status().BytesIn
		testsupport.WaitUntil(t, "data after the transfer", 20*time.Second, func() bool { return s.Status().BytesIn > in+256<<10 })
	}
	res := stop()
	for _, f := range snaps {
		checkImports(t, "snapshot", f)
	}
	checkImports(t, "live trace", res.Files[0])
}

// A snapshot holds a trigger packet for every trigger that acted in the
// session before it (as a Perfetto clone carries the session's received
// triggers), besides the clone_snapshot_trigger naming its own; both the
// snapshots and the live trace import cleanly with them.
func TestSnapshotCarriesEarlierTriggers(t *testing.T) {
	tc := `
trigger_config:
  trigger_mode: clone_snapshot
  triggers: [{name: first}, {name: second}]`
	var manual SnapshotResult
	res, pkts, dir := triggerSession(t, tc, func(s *Service) {
		testsupport.WaitUntil(t, "data", 10*time.Second, func() bool { return s.Status().BytesIn > 0 })
		s.ActivateTriggers("", "first")
		testsupport.WaitUntil(t, "the first snapshot", 20*time.Second, func() bool { return s.SnapshotStats().Taken == 1 })
		s.ActivateTriggers("", "second")
		testsupport.WaitUntil(t, "the second snapshot", 20*time.Second, func() bool { return s.SnapshotStats().Taken == 2 })
		manual = <-s.Snapshot(SnapshotRequest{})
	}, "duration=3s")
	if manual.Err != nil {
		t.Fatal(manual.Err)
	}
	for _, c := range []struct {
		file, clone, triggers string
	}{
		{filepath.Join(dir, "live.snap-1-first.pftrace"), "first", "first"},
		{filepath.Join(dir, "live.snap-2-second.pftrace"), "second", "first,second"},
		{manual.Files[0], "manual", "first,second"},
	} {
		sp := tracetest.ReadTrace(t, c.file)
		if got := triggerPackets(sp, fieldCloneSnapshotTrigger); strings.Join(got, ",") != c.clone {
			t.Errorf("%s: clone_snapshot_trigger %v, want %s", c.file, got, c.clone)
		}
		if got := triggerPackets(sp, fieldTrigger); strings.Join(got, ",") != c.triggers {
			t.Errorf("%s: trigger packets %v, want %s", c.file, got, c.triggers)
		}
		checkImports(t, "snapshot", c.file)
	}
	if got := triggerPackets(pkts, fieldTrigger); strings.Join(got, ",") != "first,second" {
		t.Errorf("live trigger packets %v", got)
	}
	checkImports(t, "live trace", res.Files[0])
}

// The load acceptance in small (tools/snapload runs it at 200 MB/s for
// 60 s): configs/flight_recorder.yaml with the drop policy, so a full SMB
// would be counted, takes snapshots back to back while its source writes;
// no producer packet is lost and no chunk discarded.
func TestSnapshotsCauseNoProducerLoss(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Load(config.LoadOptions{Path: filepath.Join("..", "configs", "flight_recorder.yaml"), Sets: []string{
		"duration=60s", "buffers[0].size_kb=4096", "data_sources[0].config.rate=2000",
		"data_sources[0].buffer_exhausted_policy=drop", "sinks[0].path=" + filepath.Join(dir, "live.pftrace"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	s, stop := startSession(t, cfg, Options{Logger: testsupport.Logger(t)})
	testsupport.WaitUntil(t, "4 MiB written (the ring wrapped)", 30*time.Second, func() bool { return s.Status().BytesIn >= 4<<20 })
	for i := range 6 {
		r := <-s.Snapshot(SnapshotRequest{Trigger: "load", Path: filepath.Join(dir, fmt.Sprintf("s%d.pftrace", i))})
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	res := stop()
	if res.Snapshots.Taken != 6 {
		t.Fatalf("snapshots %+v", res.Snapshots)
	}
	if lost := res.Stats.Tracepipe.ProducerPacketsDropped; lost != 0 || res.Stats.ChunksDiscarded != 0 {
		t.Fatalf("producers lost %d packets, %d chunks discarded", lost, res.Stats.ChunksDiscarded)
	}
}

// A file sink's filter applies to its snapshots as to its live file; the
// service packets (clock snapshot, trigger, TraceStats) pass it.
func TestSnapshotFileFiltered(t *testing.T) {
	s, dir, stop := snapshotSession(t, `sinks[0].filter=packet.kind != "track_event"`)
	r := <-s.Snapshot(SnapshotRequest{Trigger: "filtered"})
	stop()
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if want := filepath.Join(dir, "live.snap-1-filtered.pftrace"); len(r.Files) != 1 || r.Files[0] != want {
		t.Fatalf("files %v", r.Files)
	}
	var events, trig, stats int
	for _, p := range tracetest.ReadTrace(t, r.Files[0]) {
		switch {
		case p.Info.Kind() == "track_event":
			events++
		case p.Info.Kind() == "trace_stats":
			stats++
		}
		if _, ok := triggerName(p.Raw, fieldCloneSnapshotTrigger); ok {
			trig++
		}
	}
	if events != 0 || trig != 1 || stats != 1 {
		t.Fatalf("snapshot: %d track events (want 0), %d trigger packets, %d TraceStats", events, trig, stats)
	}
	if r.Packets == 0 {
		t.Fatal("the snapshot read nothing")
	}
}
