package natsink

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/sinks/remote"
	"github.com/tracepipe/tracepipe/tracefile"
)

// A message with Tracepipe-Seq 2^64-1 is refused (counted) and does not
// poison the session: batches 1..3 published after it are stored.
func TestReaderRefusesBatchBeyondWindow(t *testing.T) {
	srv := startNATS(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "W", Subjects: []string{"win"}}); err != nil {
		t.Fatal(err)
	}
	id := remote.Identity{Machine: 0x51, Session: [16]byte{5}, Hostname: "winhost"}
	publish := func(seq uint64) {
		m := nats.NewMsg("win")
		m.Header.Set(HeaderMachine, "0000000000000051")
		m.Header.Set(HeaderSession, id.SessionString())
		m.Header.Set(HeaderHost, id.Hostname)
		m.Header.Set(HeaderSeq, strconv.FormatUint(seq, 10))
		m.Data = tracefile.AppendRecord(nil, testPacket(2, seq, 64))
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	publish(1<<64 - 1)
	for seq := uint64(1); seq <= 3; seq++ {
		publish(seq)
	}
	store, err := remote.OpenStore(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	r := NewReader(ReaderOptions{URL: srv.URL(), Subject: "win", Durable: "w", Store: store, Logger: testsupport.Logger(t)})
	rctx, rcancel := context.WithCancel(bg)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := r.Run(rctx); err != nil {
			t.Error(err)
		}
	}()
	testsupport.WaitUntil(t, "batches 1..3 stored", 20*time.Second, func() bool { return store.Stats.Batches.Load() == 3 })
	rcancel()
	wg.Wait()
	if r.Refused.Load() != 1 || store.Stats.RefusedWindow.Load() != 1 {
		t.Fatalf("refused: reader %d, store %d; want 1", r.Refused.Load(), store.Stats.RefusedWindow.Load())
	}
	if d := store.Stats.Duplicates.Load(); d != 0 {
		t.Fatalf("%d batches taken for duplicates after the refusal", d)
	}
	// Batch 1's packet, the receiver's packet recording the refusal, then
	// batches 2 and 3.
	got := tracetest.ReadAll(t, store.FileName(id))
	if len(got) != 4 {
		t.Fatalf("%d packets stored, want 3 and the receiver's", len(got))
	}
	ts, ok, err := tracefile.DecodeTraceStatsPacket(got[1])
	if err != nil || !ok || ts.Tracepipe == nil || ts.Tracepipe.Receiver == nil || ts.Tracepipe.Receiver.BatchesRefused != 1 {
		t.Fatalf("packet 1 is not a receiver section recording one refused batch: %+v %v", ts, err)
	}
}
