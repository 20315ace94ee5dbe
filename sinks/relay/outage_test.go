package relay

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/sinks/remote"
)

// serveOn runs an in-process server on ln; stop closes it and waits
// until Serve returned.
func serveOn(t *testing.T, ln net.Listener, store *remote.Store) (stop func()) {
	t.Helper()
	srv := NewServer(ServerOptions{Store: store, Logger: testsupport.Logger(t)})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		srv.Close()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// Packets dropped at the queue bound while the receiver is away are the
// outage's, whatever the transport does between the drop and the moment
// the Write that dropped them reports it to the link. On a busy machine
// the transport may notice the receiver's return (or its loss) in that
// gap: here it reconnects and gets acknowledgements there. The drops
// must still fail the sink and count as lost to the outage, never as a
// full queue (TestReceiverKilled/beyond-bound saw 10 such packets).
func TestDropsInOutageRacingReconnect(t *testing.T) {
	store, err := remote.OpenStore(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	stop := serveOn(t, ln, store)

	var s *Sink
	restarted := false
	hook := func() {
		// The first Write that drops: bring the receiver back and wait
		// until the transport reconnected and had a batch acknowledged,
		// all before that Write tells the link about its drops.
		if restarted || s.out.Stats().PacketsDroppedQueue == 0 {
			return
		}
		restarted = true
		ln2, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listening again on %s: %v", addr, err)
		}
		serveOn(t, ln2, store)
		acked := s.out.Acked()
		testsupport.WaitUntil(t, "the reconnect and an acknowledgement", 20*time.Second, func() bool {
			return !s.link.IsDown() && s.out.Acked() > acked
		})
	}
	s, err = New(Options{
		Address:    addr,
		Identity:   remote.Identity{Machine: remote.HashMachineID("epsilon"), Session: [16]byte{7, 1}, Hostname: "epsilon"},
		BatchBytes: 1 << 10, MaxBatches: 2,
		BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond, CloseTimeout: 20 * time.Second,
		Logger:     testsupport.Logger(t),
		afterWrite: hook,
	})
	if err != nil {
		t.Fatal(err)
	}
	sendRange(t, s, 0, 40, 10, true)
	testsupport.WaitUntil(t, "the first 40 packets acknowledged", 20*time.Second, func() bool { return s.Stats().PacketsWritten == 40 })

	stop()
	testsupport.WaitUntil(t, "the outage noticed", 20*time.Second, s.link.IsDown)
	// One Write: two batches take about 20 packets, the rest is dropped.
	batch := make([][]byte, 0, 100)
	for n := 40; n < 140; n++ {
		batch = append(batch, testPacket(2+uint32(n%2), uint64(n), 100))
	}
	s.Write(context.Background(), batch) // drops are checked below through Stats
	if !restarted {
		t.Fatalf("nothing was dropped: stats %+v", s.Stats())
	}
	closeSink(t, s)

	st := s.Stats()
	stored := uint64(len(readPackets(t, store.FileName(s.Identity()))))
	if st.PacketsDroppedQueue != 0 || st.PacketsDroppedError == 0 || s.Failed() == nil {
		t.Errorf("stats %+v, failed %v: want the drops counted as lost to the outage, the sink failed", st, s.Failed())
	}
	if stored+st.PacketsDroppedError != 140 || st.PacketsWritten != stored {
		t.Errorf("%d stored + %d lost to the outage, want 140; written %d", stored, st.PacketsDroppedError, st.PacketsWritten)
	}
}
