package sinks

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"

	"github.com/tracepipe/tracepipe/tracefile"
)

// blockedSink never returns from Write until released.
type blockedSink struct {
	release chan struct{}
	mu      sync.Mutex
	stats   SinkStats
}

func (b *blockedSink) Write(_ context.Context, p [][]byte) error {
	<-b.release
	b.mu.Lock()
	b.stats.PacketsWritten += uint64(len(p))
	b.mu.Unlock()
	return nil
}
func (b *blockedSink) Flush(context.Context) error { return nil }
func (b *blockedSink) Close(context.Context) error { return nil }
func (b *blockedSink) Stats() SinkStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

// offerAll offers every item to every lane as the pipeline's fan-out does.
func offerAll(lanes []*Lane, items []*Item) {
	for _, it := range items {
		it.Hold(len(lanes) + 1)
		for _, l := range lanes {
			l.Offer(context.Background(), it)
		}
		it.Release()
	}
}

// A stalled sink with when_full: drop neither delays the file sink nor
// loses silently: every item reaches the file, the stalled lane counts
// what did not fit its queue, and each sink's TraceStats carries its own
// counters.
func TestLaneStalledSinkDoesNotDelayOthers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.pftrace")
	fs, err := NewFile(FileOptions{Path: path, FsyncPeriod: -1})
	if err != nil {
		t.Fatal(err)
	}
	stuck := &blockedSink{release: make(chan struct{})}
	file := NewLane(fs, LaneConfig{Name: "file", Capacity: 2, Block: true})
	drop := NewLane(stuck, LaneConfig{Name: "stuck", Capacity: 2, Block: false})
	var items []*Item
	var want [][]byte
	for i := range 50 {
		p := mkPacket(2, uint64(i), tracefile.FieldTrackEvent, 100)
		want = append(want, p)
		items = append(items, &Item{Packets: [][]byte{p}, Flush: true})
	}
	base := tracefile.TraceStats{Tracepipe: &tracefile.TracepipeStats{SinkPacketsWritten: 12345}}
	last := &Item{Stats: &base, StatsTime: 7, Final: true, Flush: true}
	done := make(chan struct{})
	go func() {
		// Everything but the final item: Offer must never wait on the
		// stalled lane.
		offerAll([]*Lane{file, drop}, items)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("offering to a stalled drop lane blocked the fan-out")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := file.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := mustRead(t, path)
	samePackets(t, got, want)
	close(stuck.release)
	offerAll([]*Lane{file, drop}, []*Item{last})
	if err := file.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := drop.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The file ends with its own TraceStats: 50 packets + itself.
	got = mustRead(t, path)
	if len(got) != 51 {
		t.Fatalf("%d packets in the file, want 51", len(got))
	}
	ts, ok, err := tracefile.DecodeTraceStatsPacket(got[50])
	if !ok || err != nil {
		t.Fatalf("last packet is not a TraceStats: %v", err)
	}
	if ts.Tracepipe.SinkPacketsWritten != uint64(len(got)) || ts.Tracepipe.SinkPacketsDropped != 0 {
		t.Errorf("file's TraceStats: written %d dropped %d, want %d and 0", ts.Tracepipe.SinkPacketsWritten, ts.Tracepipe.SinkPacketsDropped, len(got))
	}
	st := drop.Stats()
	if st.PacketsDroppedQueue == 0 || st.PacketsWritten+st.PacketsDroppedQueue != 51 {
		t.Errorf("stalled lane: %+v; want every one of the 51 packets written or counted as dropped", st)
	}
}

// With when_full: block the fan-out waits for room: nothing is dropped.
func TestLaneBlockWaits(t *testing.T) {
	stuck := &blockedSink{release: make(chan struct{})}
	l := NewLane(stuck, LaneConfig{Name: "b", Capacity: 1, Block: true})
	var items []*Item
	for i := range 5 {
		items = append(items, &Item{Packets: [][]byte{mkPacket(2, uint64(i), tracefile.FieldTrackEvent, 10)}})
	}
	done := make(chan struct{})
	go func() { offerAll([]*Lane{l}, items); close(done) }()
	select {
	case <-done:
		t.Fatal("a blocking lane took 5 items with room for 1 and a stuck sink")
	case <-time.After(50 * time.Millisecond): // the offer is still waiting: expected
	}
	close(stuck.release)
	<-done
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.PacketsWritten != 5 || st.PacketsDropped() != 0 {
		t.Errorf("stats %+v", st)
	}
}

// Service packets pass any filter; filter errors follow filter_error.
func TestLaneFilterPassAndErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.pftrace")
	fs, err := NewFile(FileOptions{Path: path, FsyncPeriod: -1})
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFilter(`packet.kind == "process_tree"`)
	if err != nil {
		t.Fatal(err)
	}
	l := NewLane(fs, LaneConfig{Name: "f", Filter: f, FilterDrop: true, Block: true})
	svc := mkPacket(1, 1, tracefile.FieldClockSnapshot, 10)
	te := mkPacket(2, 2, tracefile.FieldTrackEvent, 10)
	bad := []byte{0xff} // does not decode: a filter error
	offerAll([]*Lane{l}, []*Item{{Packets: [][]byte{svc, te, bad}, Pass: []bool{true, false, false}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	samePackets(t, mustRead(t, path), [][]byte{svc})
	if st := l.Stats(); st.PacketsFiltered != 2 || st.FilterErrors != 1 || st.PacketsWritten != 1 {
		t.Errorf("stats %+v", st)
	}
}

// discardSink accepts everything and allocates nothing.
type discardSink struct{}

func (discardSink) Write(context.Context, [][]byte) error { return nil }
func (discardSink) Flush(context.Context) error           { return nil }
func (discardSink) Close(context.Context) error           { return nil }
func (discardSink) Stats() SinkStats                      { return SinkStats{} }

// Two sessions started in the same millisecond never collide on
// {timestamp}: the second gets a suffix. A name without it is never
// overwritten.
func TestFileTimestampCollisionFree(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 24, 1, 2, 3, 456e6, time.Local)
	b, err := Config{Type: "file", Path: filepath.Join(dir, "t-{timestamp}.pftrace")}.Build()
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for range 3 {
		s, err := b.Open(Env{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, s.(*FileSink).Files()...)
		_ = s.Close(bg)
	}
	want := []string{"t-20261124-010203.456.pftrace", "t-20261124-010203.456-1.pftrace", "t-20261124-010203.456-2.pftrace"}
	for i, f := range files {
		if filepath.Base(f) != want[i] {
			t.Errorf("file %d: %s, want %s", i, filepath.Base(f), want[i])
		}
	}
	plain, _ := Config{Type: "file", Path: filepath.Join(dir, "fixed.pftrace")}.Build()
	s, err := plain.Open(Env{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close(bg)
	if _, err := plain.Open(Env{Now: now}); err == nil {
		t.Error("an existing file without {timestamp} was reused")
	}
}

// failSink fails every write.
type failSink struct{ discardSink }

func (failSink) Write(context.Context, [][]byte) error { return errors.New("EIO on purpose") }

// Sink errors are logged once at first, then rate-limited, naming the
// sink; on_error: stop calls OnFatal exactly once.
func TestLaneErrorsRateLimitedAndFatalOnce(t *testing.T) {
	var mu sync.Mutex
	var msgs testsupport.Messages
	fatal := 0
	l := NewLane(failSink{}, LaneConfig{Name: "disk", Block: true, StopOnError: true, LaneOptions: LaneOptions{
		Logger:  slog.New(&msgs),
		OnFatal: func(*Lane, error) { mu.Lock(); fatal++; mu.Unlock() },
	}})
	for i := range 100 {
		offerAll([]*Lane{l}, []*Item{{Packets: [][]byte{mkPacket(2, uint64(i), tracefile.FieldTrackEvent, 10)}}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = l.Close(ctx)
	mu.Lock()
	defer mu.Unlock()
	if logs := msgs.All(); len(logs) != 1 || !strings.Contains(logs[0], "sink disk: EIO on purpose") {
		t.Errorf("logs %q; want one line naming the sink", logs)
	}
	if fatal != 1 {
		t.Errorf("OnFatal called %d times", fatal)
	}
	if l.Err() == nil {
		t.Error("the lane does not report its error")
	}
}

// Close with a sink stuck in Write gives up when its context ends, counts
// what was still queued as dropped, and returns an error naming the sink.
func TestLaneCloseGivesUpOnStuckSink(t *testing.T) {
	stuck := &blockedSink{release: make(chan struct{})}
	defer close(stuck.release)
	l := NewLane(stuck, LaneConfig{Name: "stuck", Capacity: 4, Block: true})
	offerAll([]*Lane{l}, []*Item{
		{Packets: [][]byte{mkPacket(2, 1, tracefile.FieldTrackEvent, 10)}},
		{Packets: [][]byte{mkPacket(2, 2, tracefile.FieldTrackEvent, 10)}},
		{Packets: [][]byte{mkPacket(2, 3, tracefile.FieldTrackEvent, 10)}},
	})
	for deadline := time.Now().Add(10 * time.Second); l.QueueLen() != 2; { // the lane took the first one
		if time.Now().After(deadline) {
			t.Fatal("the lane never took an item")
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // already over: Close must not wait for the sink
	err := l.Close(ctx)
	if err == nil || !strings.Contains(err.Error(), "stuck") {
		t.Fatalf("Close: %v", err)
	}
	// One item is inside the stuck Write; the others were queued.
	if st := l.Stats(); st.PacketsDroppedQueue != 2 {
		t.Errorf("stats %+v, want the 2 queued packets dropped", st)
	}
}
