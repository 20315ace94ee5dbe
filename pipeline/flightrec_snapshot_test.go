package pipeline

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/tpimport"
	"github.com/tracepipe/tracepipe/tracefile"
)

// triggerName returns the trigger_name of a trigger / clone_snapshot_trigger
// field in packet p, if it has one.
func triggerName(p []byte, field protowire.Number) (string, bool) {
	var name string
	found := false
	walkTopLevel(p, func(num protowire.Number, f []byte) {
		if num != field {
			return
		}
		_, _, n := protowire.ConsumeTag(f)
		body, _ := protowire.ConsumeBytes(f[n:])
		walkTopLevel(body, func(num protowire.Number, g []byte) {
			if num == 1 {
				_, _, m := protowire.ConsumeTag(g)
				v, _ := protowire.ConsumeBytes(g[m:])
				name, found = string(v), true
			}
		})
	})
	return name, found
}

// A ring session with sequence state restore (configs/ring_buffer.yaml,
// shortened) takes 5 snapshots while it runs, after the ring wrapped:
// every snapshot stands alone (its own clock snapshot, trace_config,
// the clone_snapshot_trigger packet, TraceStats; tracepipe check clean),
// per sequence holds a contiguous window (no loss inside a window after
// its restore), and the live session's own trace is complete.
func TestSnapshotsOfWrappedRingStandAlone(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "ring.pftrace")
	cfg, err := config.Load(config.LoadOptions{Path: filepath.Join("..", "configs", "ring_buffer.yaml"), Sets: []string{
		"duration=60s", "buffers[0].size_kb=1024", "data_sources[0].config.rate=5000", "sinks[0].path=" + out,
	}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Options{Logger: testsupport.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type runOut struct {
		res *Result
		err error
	}
	done := make(chan runOut, 1)
	go func() {
		res, err := s.Run(ctx)
		done <- runOut{res, err}
	}()
	testsupport.WaitUntil(t, "4 MiB through a 1 MiB ring (3 wraps)", 30*time.Second, func() bool {
		return s.Status().BytesIn >= 4<<20
	})
	var results []SnapshotResult
	requested := map[int]uint64{} // snapshot number → boot time of its request
	for i := range 5 {
		trig := "manual"
		if i%2 == 1 {
			trig = "slow_frame"
		}
		at := bootNanos()
		r := <-s.Snapshot(SnapshotRequest{Trigger: trig})
		if r.Err != nil {
			t.Fatalf("snapshot %d: %v", i+1, r.Err)
		}
		requested[r.N] = at
		results = append(results, r)
	}
	cancel()
	ro := <-done
	if ro.err != nil {
		t.Fatal(ro.err)
	}
	for _, r := range results {
		if len(r.Files) != 1 {
			t.Fatalf("snapshot %d wrote %v", r.N, r.Files)
		}
		want := filepath.Join(dir, "ring.snap-"+fmt.Sprint(r.N)+"-"+r.Trigger+".pftrace")
		if r.Files[0] != want {
			t.Fatalf("snapshot file %q, want %q", r.Files[0], want)
		}
		checkSnapshotFile(t, r.Files[0], r.Trigger, requested[r.N])
		t.Logf("snapshot %d: %d packets, %d bytes, longest pause %v", r.N, r.Packets, r.Bytes, r.Pause)
	}
	// The live session's own trace is whole too.
	rep, err := tpimport.CheckFile(ro.res.Files[0], tpimport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Codes()) != 0 && !onlySMBLoss(rep) {
		t.Fatalf("live trace: %v", rep.Codes())
	}
	tp := ro.res.Stats.Tracepipe
	if tp.ProducerPacketsDropped != 0 {
		t.Fatalf("the live session lost %d producer packets", tp.ProducerPacketsDropped)
	}
}

func checkSnapshotFile(t *testing.T, path, trigger string, requested uint64) {
	t.Helper()
	pkts := tracetest.ReadTrace(t, path)
	last := map[uint32]uint64{} // sequence → its last TrackEvent's timestamp
	var clock, config, stats, trig bool
	lossAfterFirst := map[uint32]bool{}
	seen := map[uint32]bool{}
	wrapped := 0 // sequences whose window starts after an overwrite
	for _, p := range pkts {
		switch p.Info.PayloadField {
		case tracefile.FieldClockSnapshot:
			clock = true
		case tracefile.FieldTraceConfig:
			config = true
		case tracefile.FieldTraceStats:
			stats = true
		}
		if name, ok := triggerName(p.Raw, fieldCloneSnapshotTrigger); ok {
			if name != trigger {
				t.Fatalf("%s: clone_snapshot_trigger %q, want %q", path, name, trigger)
			}
			trig = true
		}
		if id := p.Info.SequenceID; id > 1 {
			if p.Info.PayloadField == tracefile.FieldTrackEvent && p.Info.HasTimestamp {
				last[id] = max(last[id], p.Info.Timestamp)
			}
			if seen[id] && p.Info.PreviousPacketDropped != 0 {
				lossAfterFirst[id] = true
			}
			if !seen[id] && p.Info.PreviousPacketDropped != 0 {
				wrapped++
			}
			seen[id] = true
		}
	}
	if !clock || !config || !stats || !trig {
		t.Fatalf("%s: clock snapshot %v, trace_config %v, trace stats %v, trigger %v", path, clock, config, stats, trig)
	}
	if wrapped == 0 {
		t.Fatalf("%s: no sequence starts after an overwrite: the ring had not wrapped, the test proves nothing", path)
	}
	// The window ends at the snapshot: the flush brought every writer's
	// packets up to the request (a writer at 5000 packets/s writes one
	// every 0.2 ms; a second allows for a loaded machine).
	for id, ts := range last {
		if ts+uint64(time.Second) < requested {
			t.Fatalf("%s: sequence %d ends %v before the snapshot was requested", path, id, time.Duration(requested-ts))
		}
	}
	if len(last) == 0 {
		t.Fatalf("%s: no TrackEvent packets", path)
	}
	if len(lossAfterFirst) != 0 {
		t.Fatalf("%s: sequences %v have a gap inside the snapshot's window", path, lossAfterFirst)
	}
	checkImports(t, "snapshot", path)
}

// snapshotSession starts a small ring session with the synthetic source
// and returns it running; stop cancels it and returns its result.
func snapshotSession(t *testing.T, sets ...string) (s *Service, dir string, stop func() *Result) {
	t.Helper()
	dir = t.TempDir()
	cfg, err := config.Load(config.LoadOptions{Path: filepath.Join("..", "configs", "ring_buffer.yaml"), Sets: append([]string{
		"duration=60s", "buffers[0].size_kb=1024", "data_sources[0].config.rate=2000",
		"sinks[0].path=" + filepath.Join(dir, "live.pftrace"),
	}, sets...)})
	if err != nil {
		t.Fatal(err)
	}
	s, stop = startSession(t, cfg, Options{Logger: testsupport.Logger(t)})
	testsupport.WaitUntil(t, "data in the buffer", 30*time.Second, func() bool { return s.Status().BytesIn > 64<<10 })
	return s, dir, stop
}

// A snapshot that cannot be written is reported and counted; the live
// session goes on and ends normally, and the next snapshot works.
func TestSnapshotFailureDoesNotStopSession(t *testing.T) {
	s, dir, stop := snapshotSession(t)
	r := <-s.Snapshot(SnapshotRequest{Trigger: "bad", Path: filepath.Join(dir, "missing-dir", "x.pftrace")})
	if r.Err == nil {
		t.Fatal("a snapshot into a missing directory succeeded")
	}
	ok := <-s.Snapshot(SnapshotRequest{Trigger: "good"})
	if ok.Err != nil {
		t.Fatalf("the snapshot after a failed one: %v", ok.Err)
	}
	res := stop()
	if res.Snapshots.Failed != 1 || res.Snapshots.Taken != 1 {
		t.Fatalf("snapshot counters %+v; want 1 failed, 1 taken", res.Snapshots)
	}
	if len(res.Files) == 0 {
		t.Fatal("the live session wrote nothing")
	}
}

// Requests beyond the cap are refused and counted at once, never queued:
// every request gets an answer, and at most the cap are taken together.
func TestSnapshotsInFlightCapped(t *testing.T) {
	s, _, stop := snapshotSession(t)
	const n = 12
	var chans []<-chan SnapshotResult
	for range n {
		chans = append(chans, s.Snapshot(SnapshotRequest{Trigger: "burst"}))
	}
	var taken, refused int
	for _, c := range chans {
		select {
		case r := <-c:
			switch {
			case r.Err == nil:
				taken++
			case r.Err == ErrSnapshotsBusy:
				refused++
			default:
				t.Fatalf("snapshot: %v", r.Err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a snapshot request got no answer")
		}
	}
	res := stop()
	if taken == 0 || refused == 0 || taken+refused != n {
		t.Fatalf("%d taken, %d refused of %d", taken, refused, n)
	}
	if int(res.Snapshots.Refused) != refused || int(res.Snapshots.Taken) != taken {
		t.Fatalf("counters %+v, answers %d taken %d refused", res.Snapshots, taken, refused)
	}
}

// Two snapshots requested together are both taken: the second waits for
// the first's copy (one clone per buffer at a time) instead of failing.
func TestConcurrentSnapshotsBothTaken(t *testing.T) {
	s, _, stop := snapshotSession(t, "buffers[0].size_kb=131072", "data_sources[0].config.rate=0")
	a := s.Snapshot(SnapshotRequest{Trigger: "a"})
	b := s.Snapshot(SnapshotRequest{Trigger: "b"})
	for _, c := range []<-chan SnapshotResult{a, b} {
		if r := <-c; r.Err != nil {
			t.Fatalf("snapshot %s: %v", r.Trigger, r.Err)
		}
	}
	if res := stop(); res.Snapshots.Taken != 2 || res.Snapshots.Failed != 0 {
		t.Fatalf("snapshot counters %+v", res.Snapshots)
	}
}

// memorySink keeps what it is given (Options.SnapshotSink in tests).
type memorySink struct {
	mu      sync.Mutex
	packets [][]byte
	closed  bool
}

func (m *memorySink) Write(_ context.Context, pkts [][]byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range pkts {
		m.packets = append(m.packets, append([]byte(nil), p...))
	}
	return nil
}
func (m *memorySink) Flush(context.Context) error { return nil }
func (m *memorySink) Close(context.Context) error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	return nil
}
func (m *memorySink) Stats() sinks.SinkStats { return sinks.SinkStats{} }

// Options.SnapshotSink receives each snapshot as a trace of its own, as a
// file sink's snapshot file does.
func TestSnapshotSinkOption(t *testing.T) {
	cfg := cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 60s
buffers: [{size_kb: 1024}]
data_sources: [{name: tracepipe.synthetic, config: {writers: 1, rate: 500}}]
sinks: [{type: file, path: %q}]
`, filepath.Join(t.TempDir(), "live.pftrace")))
	var got []*memorySink
	var mu sync.Mutex
	s, err := New(cfg, Options{Logger: testsupport.Logger(t), SnapshotSink: func(n int, trigger string) (sinks.Sink, error) {
		m := &memorySink{}
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
		return m, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _, _ = s.Run(ctx) }()
	testsupport.WaitUntil(t, "data", 20*time.Second, func() bool { return s.Status().BytesIn > 0 })
	r := <-s.Snapshot(SnapshotRequest{Trigger: "mem"})
	cancel()
	<-done
	if r.Err != nil || len(got) != 1 || !got[0].closed {
		t.Fatalf("snapshot %v, sinks %d", r.Err, len(got))
	}
	var trig, stats bool
	for _, p := range got[0].packets {
		if name, ok := triggerName(p, fieldCloneSnapshotTrigger); ok && name == "mem" {
			trig = true
		}
		if _, ok, _ := tracefile.DecodeTraceStatsPacket(p); ok {
			stats = true
		}
	}
	if !trig || !stats {
		t.Fatalf("snapshot sink: trigger packet %v, TraceStats %v, %d packets", trig, stats, len(got[0].packets))
	}
}

// transfer_on_clone moves the buffer into the snapshot (no copy) and the
// live session goes on in an empty one: the snapshot's packets precede
// the live trace's. clear_before_clone empties the buffer before the
// snapshot's flush: the snapshot holds only what was written after the
// request.
func TestSnapshotTransferOnClone(t *testing.T) {
	for _, clear := range []bool{false, true} {
		t.Run(fmt.Sprint("clear=", clear), func(t *testing.T) {
			s, dir, stop := snapshotSession(t, "buffers[0].size_kb=16384", "buffers[0].transfer_on_clone=true", fmt.Sprintf("buffers[0].clear_before_clone=%v", clear))
			testsupport.WaitUntil(t, "1 s of recording", 20*time.Second, func() bool { return s.Status().Elapsed >= time.Second })
			before := bootNanos()
			r := <-s.Snapshot(SnapshotRequest{Trigger: "moved"})
			after := bootNanos()
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			res := stop()
			snapTS := dataTimestamps(tracetest.ReadTrace(t, r.Files[0]))
			liveTS := dataTimestamps(tracetest.ReadTrace(t, res.Files[0]))
			if len(snapTS) == 0 || len(liveTS) == 0 {
				t.Fatalf("snapshot %d data packets, live %d", len(snapTS), len(liveTS))
			}
			if slices.Max(snapTS) > after || slices.Min(liveTS) < before {
				t.Fatal("the snapshot and the live trace overlap: the buffer was copied, not moved")
			}
			// What writers held in their chunks reaches the buffer with
			// the flush: at most a commit tick and a chunk old, far less
			// than the second recorded before the request.
			const held = uint64(300 * time.Millisecond)
			if clear && slices.Min(snapTS) < before-held {
				t.Fatalf("clear_before_clone: the snapshot holds data %v older than the request", time.Duration(before-slices.Min(snapTS)))
			}
			if !clear && slices.Min(snapTS) >= before-held {
				t.Fatal("without clear_before_clone the snapshot lacks the data recorded before the request")
			}
			_ = dir
		})
	}
}

// dataTimestamps lists the timestamps of the data sources' packets.
func dataTimestamps(pkts []tracetest.Packet) []uint64 {
	var out []uint64
	for _, p := range pkts {
		if p.Info.SequenceID > 1 && p.Info.HasTimestamp && p.Info.PayloadField == tracefile.FieldTrackEvent {
			out = append(out, p.Info.Timestamp)
		}
	}
	return out
}

// A snapshot's TraceStats counts the packets of its own file, the stats
// packet included (as a lane does), and its own restores.
func TestSnapshotTraceStatsCountsItsFile(t *testing.T) {
	s, _, stop := snapshotSession(t)
	r := <-s.Snapshot(SnapshotRequest{Trigger: "count"})
	stop()
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	pkts := tracetest.ReadTrace(t, r.Files[0])
	ts, ok, err := tracefile.DecodeTraceStatsPacket(pkts[len(pkts)-1].Raw)
	if !ok || err != nil {
		t.Fatal("the snapshot does not end with its TraceStats")
	}
	if ts.Tracepipe.SinkPacketsWritten != uint64(len(pkts)) {
		t.Fatalf("TraceStats counts %d packets written, the file holds %d", ts.Tracepipe.SinkPacketsWritten, len(pkts))
	}
}
