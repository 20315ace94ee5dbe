package relay

import (
	"context"
	"log/slog"
	"net"
	"strings"
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

// fakeReceiver is a relay receiver the test drives frame by frame, on
// its own goroutine: every accept and read has a deadline.
type fakeReceiver struct {
	t  *testing.T
	ln *net.TCPListener
}

// fakeWait bounds each step of a fake receiver.
const fakeWait = 20 * time.Second

func newFakeReceiver(t *testing.T) *fakeReceiver {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &fakeReceiver{t: t, ln: ln.(*net.TCPListener)}
}

func (f *fakeReceiver) addr() string { return f.ln.Addr().String() }

// fakeConn is one connection of a fakeReceiver, past the hello.
type fakeConn struct {
	t  *testing.T
	c  net.Conn
	fr *frameReader
}

// accept takes the next connection and answers its hello, saying that
// batches up to last are stored.
func (f *fakeReceiver) accept(last uint64) *fakeConn {
	f.t.Helper()
	_ = f.ln.SetDeadline(time.Now().Add(fakeWait))
	c, err := f.ln.Accept()
	if err != nil {
		f.t.Fatalf("fake receiver: accept: %v", err)
	}
	f.t.Cleanup(func() { c.Close() })
	fc := &fakeConn{t: f.t, c: c, fr: newFrameReader(c)}
	_ = c.SetDeadline(time.Now().Add(fakeWait))
	if typ, _, err := fc.fr.next(); err != nil || typ != frameHello {
		f.t.Fatalf("fake receiver: first frame type %d, %v", typ, err)
	}
	if _, err := c.Write(appendHelloAck(nil, last)); err != nil {
		f.t.Fatalf("fake receiver: hello ack: %v", err)
	}
	return fc
}

// batch reads the next frame, which must be the batch numbered seq.
func (fc *fakeConn) batch(seq uint64) {
	fc.t.Helper()
	_ = fc.c.SetReadDeadline(time.Now().Add(fakeWait))
	typ, p, err := fc.fr.next()
	if err != nil || typ != frameBatch {
		fc.t.Fatalf("fake receiver: frame type %d, %v; want batch %d", typ, err, seq)
	}
	got, _, _, _, err := DecodeBatch(p)
	if err != nil || got != seq {
		fc.t.Fatalf("fake receiver: batch %d, %v; want %d", got, err, seq)
	}
}

// ack acknowledges every batch up to seq.
func (fc *fakeConn) ack(seq uint64) {
	fc.t.Helper()
	_ = fc.c.SetWriteDeadline(time.Now().Add(fakeWait))
	if _, err := fc.c.Write(appendSeqFrame(nil, frameAck, seq)); err != nil {
		fc.t.Fatalf("fake receiver: ack %d: %v", seq, err)
	}
}

// newFakeSink returns a relay sink to f with batches of 10 test packets,
// at most two held, and no clock sync (the fake does not answer it).
func newFakeSink(t *testing.T, f *fakeReceiver, host string, log *slog.Logger) *Sink {
	t.Helper()
	if log == nil {
		log = testsupport.Logger(t)
	}
	s, err := New(Options{
		Address:    f.addr(),
		Identity:   remote.Identity{Machine: remote.HashMachineID(host), Session: [16]byte{9, 1}, Hostname: host},
		BatchBytes: 1 << 10, MaxBatches: 2,
		BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond, CloseTimeout: 5 * time.Second,
		ClockSyncPeriod: -1,
		Logger:          log,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// writeFlush writes test packets [from, to) in one Write, then seals.
func writeFlush(s *Sink, from, to int) {
	batch := make([][]byte, 0, to-from)
	for n := from; n < to; n++ {
		batch = append(batch, testPacket(2, uint64(n), 100))
	}
	s.Write(context.Background(), batch) // drops are checked through Stats
	s.Flush(context.Background())
}

// An acknowledgement proves the receiver alive after a drop only when it
// acknowledges a batch sealed after the drop: one for an older batch may
// have been sent before the receiver died, and read by the sender only
// after it dropped packets for want of room (on a busy machine its ack
// reader lags; TestReceiverKilled/beyond-bound saw 50 to 980 such
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
			s := newFakeSink(t, f, "zeta", nil)
			defer closeSink(t, s)
			c := f.accept(0)
			writeFlush(s, 0, 20) // two batches of 10: the queue is full
			c.batch(1)
			c.batch(2)
			writeFlush(s, 20, 120) // no room: all dropped, while the receiver is alive
			if st := s.out.Stats(); st.PacketsDroppedQueue != 100 {
				t.Fatalf("outbox stats %+v, want 100 dropped", st)
			}
			c.ack(2) // both batches, read after the drops
			testsupport.WaitUntil(t, "the acknowledgement read", fakeWait, func() bool { return s.out.Acked() == 2 })
			if !dies {
				writeFlush(s, 120, 130) // batch 3, sealed after the drops
				c.batch(3)
				c.ack(3)
				testsupport.WaitUntil(t, "the acknowledgement read", fakeWait, func() bool { return s.out.Acked() == 3 })
			}
			c.c.Close()
			f.ln.Close()
			testsupport.WaitUntil(t, "the outage noticed", fakeWait, s.link.IsDown)
			st := s.Stats()
			if dies && (st.PacketsDroppedQueue != 0 || st.PacketsDroppedError != 100 || s.Failed() == nil) {
				t.Errorf("stats %+v, failed %v: want the 100 drops lost to the outage, the sink failed", st, s.Failed())
			}
			if !dies && (st.PacketsDroppedQueue != 100 || st.PacketsDroppedError != 0 || s.Failed() != nil || st.PacketsWritten != 30) {
				t.Errorf("stats %+v, failed %v: want 30 written, 100 drops of a slow receiver, no failure", st, s.Failed())
			}
		})
	}
}

// A receiver that answers the hello but dies before it acknowledged a
// batch has not ended the outage: the sink reports no "resumed" and no
// reconnect for it, and the outage goes on (one "unreachable" line) until
// a receiver acknowledges data again.
func TestResumedOnlyWhenDataAccepted(t *testing.T) {
	var msgs testsupport.Messages
	f := newFakeReceiver(t)
	s := newFakeSink(t, f, "eta", slog.New(&msgs))
	defer closeSink(t, s)
	c := f.accept(0)
	writeFlush(s, 0, 10)
	c.batch(1)
	c.ack(1)
	testsupport.WaitUntil(t, "batch 1 acknowledged", fakeWait, func() bool { return s.out.Acked() == 1 })
	c.c.Close() // the receiver dies
	testsupport.WaitUntil(t, "the outage noticed", fakeWait, s.link.IsDown)

	writeFlush(s, 10, 20) // batch 2
	fails := s.Failures.Load()
	c = f.accept(1) // back, but it dies after answering the hello
	c.batch(2)
	c.c.Close()
	testsupport.WaitUntil(t, "the short session ended", fakeWait, func() bool { return s.Failures.Load() > fails })
	if st := s.Stats(); !s.link.IsDown() || st.Reconnects != 0 {
		t.Errorf("after a hello but no acknowledgement: down %v, stats %+v; want still down, no reconnect", s.link.IsDown(), st)
	}
	for _, m := range msgs.All() {
		if strings.Contains(m, "resumed") {
			t.Errorf("logged %q before the receiver took any data", m)
		}
	}

	c = f.accept(1)
	c.batch(2)
	c.ack(2)
	testsupport.WaitUntil(t, "the outage's end", fakeWait, func() bool { return !s.link.IsDown() })
	var unreachable, resumed int
	for _, m := range msgs.All() {
		unreachable += strings.Count(m, "unreachable since")
		resumed += strings.Count(m, "resumed after")
	}
	if st := s.Stats(); unreachable != 1 || resumed != 1 || st.Reconnects != 1 || st.PacketsWritten != 20 {
		t.Errorf("%d outages logged, %d ends, stats %+v; want one outage, one end, one reconnect, 20 written\n%s",
			unreachable, resumed, st, strings.Join(msgs.All(), "\n"))
	}
}
