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

// fakeReceiver is a relay receiver the test drives frame by frame: it
// answers the hello, then hands the batches it reads to the test, and
// acknowledges only what the test tells it to.
type fakeReceiver struct {
	t       *testing.T
	ln      net.Listener
	conn    chan net.Conn
	batches chan uint64 // seq of each batch read
}

func newFakeReceiver(t *testing.T) *fakeReceiver {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeReceiver{t: t, ln: ln, conn: make(chan net.Conn, 1), batches: make(chan uint64, 64)}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		fr := newFrameReader(c)
		if typ, _, err := fr.next(); err != nil || typ != frameHello {
			t.Errorf("fake receiver: first frame type %d, %v", typ, err)
			return
		}
		if _, err := c.Write(appendHelloAck(nil, 0)); err != nil {
			t.Errorf("fake receiver: hello ack: %v", err)
			return
		}
		f.conn <- c
		for {
			typ, p, err := fr.next()
			if err != nil {
				return // the test closed it, or the sender did
			}
			if typ != frameBatch {
				t.Errorf("fake receiver: frame type %d", typ)
				return
			}
			seq, _, _, _, err := DecodeBatch(p)
			if err != nil {
				t.Errorf("fake receiver: %v", err)
				return
			}
			f.batches <- seq
		}
	}()
	return f
}

// read waits for the batch numbered seq.
func (f *fakeReceiver) read(seq uint64) {
	f.t.Helper()
	select {
	case got := <-f.batches:
		if got != seq {
			f.t.Fatalf("fake receiver: batch %d, want %d", got, seq)
		}
	case <-time.After(20 * time.Second):
		f.t.Fatalf("fake receiver: no batch %d within 20 s", seq)
	}
}

// An acknowledgement proves the receiver alive after a drop only when it
// acknowledges a batch sealed after the drop: one for an older batch may
// have been sent before the receiver died, and read by the sender only
// after it dropped packets for want of room (on a busy machine its ack
// reader lags; TestReceiverKilled/beyond-bound saw 50 to 860 such
// packets counted as queue drops). Drops followed only by such old
// acknowledgements and then the receiver's end are the outage's; drops
// followed by the acknowledgement of a later batch were a slow
// receiver's (a full queue).
func TestStaleAckDoesNotExcuseDrops(t *testing.T) {
	for _, dies := range []bool{true, false} {
		name := "receiver-dies"
		if !dies {
			name = "receiver-acks-later-batch"
		}
		t.Run(name, func(t *testing.T) {
			f := newFakeReceiver(t)
			s, err := New(Options{
				Address:    f.ln.Addr().String(),
				Identity:   remote.Identity{Machine: remote.HashMachineID("zeta"), Session: [16]byte{9, 1}, Hostname: "zeta"},
				BatchBytes: 1 << 10, MaxBatches: 2,
				BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond, CloseTimeout: 5 * time.Second,
				ClockSyncPeriod: -1,
				Logger:          testsupport.Logger(t),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer closeSink(t, s)
			var c net.Conn
			select {
			case c = <-f.conn:
			case <-time.After(20 * time.Second):
				t.Fatal("no connection from the sink")
			}
			write := func(from, to int) {
				batch := make([][]byte, 0, to-from)
				for n := from; n < to; n++ {
					batch = append(batch, testPacket(2, uint64(n), 100))
				}
				s.Write(context.Background(), batch) // drops are checked through Stats
				s.Flush(context.Background())
			}
			write(0, 20) // two batches of 10: the queue is full
			f.read(1)
			f.read(2)
			write(20, 120) // no room: all dropped, while the receiver is alive
			if st := s.out.Stats(); st.PacketsDroppedQueue != 100 {
				t.Fatalf("outbox stats %+v, want 100 dropped", st)
			}
			// The receiver's acknowledgement of both batches, read after
			// the drops.
			if _, err := c.Write(appendSeqFrame(nil, frameAck, 2)); err != nil {
				t.Fatal(err)
			}
			testsupport.WaitUntil(t, "the acknowledgement read", 20*time.Second, func() bool { return s.out.Acked() == 2 })
			if dies {
				c.Close()
				f.ln.Close()
				testsupport.WaitUntil(t, "the outage noticed", 20*time.Second, s.link.IsDown)
				st := s.Stats()
				if st.PacketsDroppedQueue != 0 || st.PacketsDroppedError != 100 || s.Failed() == nil {
					t.Errorf("stats %+v, failed %v: want the 100 drops lost to the outage, the sink failed", st, s.Failed())
				}
				return
			}
			write(120, 130) // batch 3, sealed after the drops
			f.read(3)
			if _, err := c.Write(appendSeqFrame(nil, frameAck, 3)); err != nil {
				t.Fatal(err)
			}
			testsupport.WaitUntil(t, "the acknowledgement read", 20*time.Second, func() bool { return s.out.Acked() == 3 })
			c.Close()
			f.ln.Close()
			testsupport.WaitUntil(t, "the outage noticed", 20*time.Second, s.link.IsDown)
			st := s.Stats()
			if st.PacketsDroppedQueue != 100 || st.PacketsDroppedError != 0 || s.Failed() != nil || st.PacketsWritten != 30 {
				t.Errorf("stats %+v, failed %v: want 30 written, 100 drops of a slow receiver, no failure", st, s.Failed())
			}
		})
	}
}
