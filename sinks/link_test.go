package sinks

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/tracefile"
)

// An outage is logged once when it starts and once when it ends (with
// its length and cost); attempts in between change nothing; an outage
// that ends after the destination was reached once is a reconnect, not
// an error, and fails nothing.
func TestLinkOutageLoggedOnceAndNotALoss(t *testing.T) {
	var msgs testsupport.Messages
	l := NewLink("nats://h:1 subject s", slog.New(&msgs))
	now := time.Date(2026, 1, 1, 12, 1, 3, 0, time.UTC)
	l.now = func() time.Time { return now }
	l.Up(0) // first contact: not a reconnect
	refused := errors.New("connection refused")
	for range 5 {
		l.Down(refused, 0)
	}
	if err := l.Cause(); !errors.Is(err, refused) {
		t.Fatalf("cause %v", err)
	}
	now = now.Add(4100 * time.Millisecond)
	l.Up(0)
	l.Up(0)
	want := []string{
		"nats://h:1 subject s: unreachable since 12:01:03 (connection refused)",
		"nats://h:1 subject s: resumed after 4.1 s, nothing lost",
	}
	if got := msgs.All(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("logs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	st := l.Adjust(SinkStats{PacketsWritten: 10})
	if l.Failed() != nil || st.Errors != 0 || st.Reconnects != 1 || l.IsDown() {
		t.Errorf("after an outage that lost nothing: failed %v, stats %+v", l.Failed(), st)
	}
}

// Packets dropped at the queue bound before the outage was noticed (a
// dead peer is found late), and during it, are lost to it: the sink
// fails and the drops count as errors, not as a full queue. Drops while
// the destination acknowledges are a full queue.
func TestLinkDropsDuringOutageFailTheSink(t *testing.T) {
	l := NewLink("relay tcp://h:1", nil)
	l.Up(0)
	l.NoteDrops(SinkStats{PacketsDroppedQueue: 3, BytesDroppedQueue: 30})
	l.Acked() // the destination is alive: those 3 were a slow destination's
	l.NoteDrops(SinkStats{PacketsDroppedQueue: 5, BytesDroppedQueue: 50})
	if l.Failed() != nil {
		t.Fatal("drops while no outage is known failed the sink")
	}
	l.Down(errors.New("connection reset by peer"), 5)
	l.NoteDrops(SinkStats{PacketsDroppedQueue: 9, BytesDroppedQueue: 90})
	if err := l.Failed(); err == nil || !strings.Contains(err.Error(), "connection reset by peer") {
		t.Fatalf("failure %v, want the outage's cause", err)
	}
	st := l.Adjust(SinkStats{PacketsDroppedQueue: 9, BytesDroppedQueue: 90})
	if st.PacketsDroppedQueue != 3 || st.PacketsDroppedError != 6 || st.BytesDroppedError != 60 || st.Errors != 1 {
		t.Errorf("stats %+v: want 3 queue drops (before the ack), 6 lost to the outage, one error", st)
	}
}

// A permanent cause fails the sink at once, before any packet is lost.
func TestLinkPermanentCauseFails(t *testing.T) {
	l := NewLink("relay tls://h:1", nil)
	tlsErr := Permanent(errors.New("TLS mismatch"))
	l.Down(tlsErr, 0)
	if err := l.Failed(); err == nil || !IsPermanent(err) || err.Error() != "TLS mismatch" {
		t.Fatalf("failure %v", err)
	}
	if IsPermanent(errors.New("connection refused")) {
		t.Fatal("an ordinary error is permanent")
	}
}

// failingLater is a sink that fails outside Write (as a network sink
// whose destination cannot be reached does).
type failingLater struct {
	discardSink
	failed atomic.Bool
}

func (f *failingLater) Failed() error {
	if f.failed.Load() {
		return errors.New("no stream for the subject")
	}
	return nil
}

// The lane applies on_error to a failure a sink reports on its own: once,
// logged, OnFatal called, Err set; and lists a lossy peer in the
// TraceStats it writes, but never itself.
func TestLaneActsOnFailerAndListsPeers(t *testing.T) {
	var mu sync.Mutex
	var msgs testsupport.Messages
	fatal := 0
	sk := &failingLater{}
	l := NewLane(sk, LaneConfig{Name: "sinks[1]", Destination: "nats://h x", Block: true, StopOnError: true, LaneOptions: LaneOptions{
		Logger: slog.New(&msgs), Index: 1,
		OnFatal: func(*Lane, error) { mu.Lock(); fatal++; mu.Unlock() },
	}})
	offerAll([]*Lane{l}, []*Item{{Packets: [][]byte{mkPacket(2, 1, tracefile.FieldTrackEvent, 10)}}})
	sk.failed.Store(true)
	for i := range 3 {
		offerAll([]*Lane{l}, []*Item{{Packets: [][]byte{mkPacket(2, uint64(i+2), tracefile.FieldTrackEvent, 10)}}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	_ = l.Close(ctx)
	mu.Lock()
	defer mu.Unlock()
	if fatal != 1 || l.Err() == nil || !strings.Contains(l.Err().Error(), "no stream") {
		t.Errorf("OnFatal %d times, Err %v", fatal, l.Err())
	}
	if logs := msgs.All(); len(logs) != 1 || !strings.Contains(logs[0], "sink sinks[1]: no stream for the subject") {
		t.Errorf("logs %q", logs)
	}
	p, ok := l.PeerStats()
	if !ok || p.Index != 1 || p.Failed != 1 || p.Destination != "nats://h x" {
		t.Errorf("PeerStats %+v %v", p, ok)
	}
}

// A lane's TraceStats lists the item's lossy peers except itself.
func TestLaneTraceStatsListsPeersButNotItself(t *testing.T) {
	m := &memSink{}
	l := NewLane(m, LaneConfig{Name: "sinks[0]", Block: true, LaneOptions: LaneOptions{Index: 0}})
	it := &Item{Stats: &tracefile.TraceStats{}, Final: true, Peers: []tracefile.PeerSinkStats{
		{Index: 0, Destination: "self", PacketsDropped: 1},
		{Index: 2, Destination: "nats://h x", PacketsDropped: 7, Failed: 1, Error: "no stream"},
	}}
	offerAll([]*Lane{l}, []*Item{it})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	pkts := m.packets()
	if len(pkts) != 1 {
		t.Fatalf("%d packets written, want the TraceStats", len(pkts))
	}
	ts, ok, err := tracefile.DecodeTraceStatsPacket(pkts[0])
	if err != nil || !ok {
		t.Fatalf("decode: %v %v", ok, err)
	}
	if p := ts.Tracepipe.PeerSinks; len(p) != 1 || p[0].Index != 2 || p[0].Error != "no stream" {
		t.Errorf("peer_sinks %+v, want only sinks[2]", p)
	}
}

// A destination never reached fails the sink once its first outage
// outlasts the first-contact timeout, even though nothing was dropped
// yet; after a first contact, an outage alone fails nothing.
func TestLinkFirstContactTimeout(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	never := NewLink("relay tcp://h:1", nil)
	never.now = func() time.Time { return now }
	never.SetFirstContactTimeout(5 * time.Second)
	never.Down(errors.New("connection refused"), 0)
	now = now.Add(4 * time.Second)
	if err := never.Failed(); err != nil {
		t.Fatalf("failed before the timeout: %v", err)
	}
	now = now.Add(time.Second)
	if err := never.Failed(); err == nil || !strings.Contains(err.Error(), "not reached since 12:00:00") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("failure %v, want the first contact timeout with its cause", err)
	}

	once := NewLink("relay tcp://h:1", nil)
	once.now = func() time.Time { return now }
	once.SetFirstContactTimeout(5 * time.Second)
	once.Up(0)
	once.Down(errors.New("connection refused"), 0)
	now = now.Add(time.Minute)
	if err := once.Failed(); err != nil {
		t.Fatalf("an outage after a first contact, with nothing lost, failed the sink: %v", err)
	}
}

// With the sink's counters (SetCounters), an acknowledgement covers only
// the drops counted before the batch it acknowledges was sealed: one of
// an older batch may have been sent before the destination died. Drops
// it does not cover are the next outage's; drops a later batch's
// acknowledgement covers were a slow destination's.
func TestLinkAckCoversOnlyEarlierDrops(t *testing.T) {
	var raw SinkStats
	next := uint64(3) // batches 1 and 2 sent, unacknowledged
	l := NewLink("relay tcp://h:1", nil)
	l.SetCounters(func() (SinkStats, uint64) { return raw, next })
	l.Up(0)
	raw.PacketsDroppedQueue, raw.BytesDroppedQueue = 4, 40 // no room: batch 3 not sealed yet
	l.NoteDrops(SinkStats{})                               // ignored: the link reads raw
	l.AckedUpTo(2)                                         // old batches: proves nothing about the 4
	next = 4                                               // batch 3 sealed
	raw.PacketsDroppedQueue, raw.BytesDroppedQueue = 7, 70
	l.NoteDrops(SinkStats{})
	l.AckedUpTo(3) // covers the first 4 (sealed after them), not the last 3
	if l.Failed() != nil {
		t.Fatal("drops while the destination acknowledges failed the sink")
	}
	raw.PacketsDroppedQueue, raw.BytesDroppedQueue = 9, 90 // counted, not yet reported by the Write
	l.Down(errors.New("connection reset by peer"), 0)
	if err := l.Failed(); err == nil || !strings.Contains(err.Error(), "connection reset by peer") {
		t.Fatalf("failure %v, want the outage's cause", err)
	}
	st := l.Adjust(raw)
	if st.PacketsDroppedQueue != 4 || st.PacketsDroppedError != 5 || st.BytesDroppedError != 50 || st.Errors != 1 {
		t.Errorf("stats %+v: want 4 queue drops (covered by batch 3's ack), 5 lost to the outage, one error", st)
	}
	if len(l.pend) != 0 {
		t.Errorf("%d pending entries after the outage began", len(l.pend))
	}
}
