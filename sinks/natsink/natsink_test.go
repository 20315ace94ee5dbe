package natsink

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/sinks/remote"
	"github.com/tracepipe/tracepipe/tracefile"
)

var bg = context.Background()

func testPacket(seq uint32, n uint64, size int) []byte {
	p := tracefile.AppendTimestamp(nil, n)
	pad := max(size-len(p)-8, 0)
	p = append(p, 0x5a, byte(pad|0x80), byte(pad>>7))
	for i := 0; i < pad; i++ {
		p = append(p, byte(i+int(n)))
	}
	return tracefile.AppendTrusted(p, tracefile.Trusted{UID: 7, SequenceID: seq})
}

func newTestSink(t testing.TB, url, subject string) *Sink {
	t.Helper()
	s, err := New(Options{
		URL: url, Subject: subject, CreateStream: true, Stream: "T",
		Identity:   remote.Identity{Machine: 77, Session: [16]byte{9, 9}, Hostname: "natshost"},
		BatchBytes: 16 << 10, MaxBatches: 1024, AckTimeout: time.Second,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond, CloseTimeout: 30 * time.Second, Logger: testsupport.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// send writes packets [from, to) to every sink, flushing every 50,
// waiting for room in the nats sink's queue (a producer slower than the
// network) unless unpaced.
func send(t testing.TB, s *Sink, also sinks.Sink, from, to int, paced bool) {
	for n := from; n < to; n++ {
		if paced {
			testsupport.WaitUntil(t, "room in the queue", 30*time.Second, func() bool { return s.QueueDepth() < s.out.MaxBatches()-1 })
		}
		batch := [][]byte{testPacket(2+uint32(n%3), uint64(n), 200)}
		s.Write(bg, batch)
		if also != nil {
			if err := also.Write(bg, batch); err != nil {
				t.Fatal(err)
			}
		}
		if (n+1)%50 == 0 {
			s.Flush(bg)
		}
	}
	s.Flush(bg)
}

// readBack consumes the subject into a fresh store until want batches
// were stored, and returns the trace of id.
func readBack(t *testing.T, url, subject string, id remote.Identity, want uint64) [][]byte {
	t.Helper()
	store, err := remote.OpenStore(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	r := NewReader(ReaderOptions{URL: url, Subject: subject, Durable: "test", Store: store, Logger: testsupport.Logger(t)})
	ctx, cancel := context.WithCancel(bg)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := r.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for store.Stats.Batches.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("read back %d batches of %d in 30s (%d duplicates, %d gaps, %d bad)", store.Stats.Batches.Load(), want,
				store.Stats.Duplicates.Load(), store.Stats.Gaps.Load(), r.Bad.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if d := store.Stats.Duplicates.Load(); d != 0 {
		t.Errorf("reader saw %d duplicate batches", d)
	}
	return tracetest.ReadAll(t, store.FileName(id))
}

// streamMsgs is the number of messages the stream stores.
func streamMsgs(t *testing.T, url string) uint64 {
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(bg, "T")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(bg)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestNATSRoundTrip: what the file sink writes and what is read back from
// JetStream are the same packets in the same order.
func TestNATSRoundTrip(t *testing.T) {
	srv := startNATS(t)
	s := newTestSink(t, srv.URL(), "traces.a")
	file, err := sinks.NewFile(sinks.FileOptions{Path: filepath.Join(t.TempDir(), "ref.pftrace"), FsyncPeriod: -1})
	if err != nil {
		t.Fatal(err)
	}
	send(t, s, file, 0, 3000, true)
	if err := s.Close(bg); err != nil {
		t.Fatal(err)
	}
	if err := file.Close(bg); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.PacketsWritten != 3000 || st.PacketsDropped() != 0 {
		t.Fatalf("stats %+v, want 3000 acknowledged", st)
	}
	batches := s.out.Acked()
	got := readBack(t, srv.URL(), "traces.a", s.Identity(), batches)
	want := tracetest.ReadAll(t, file.Files()[0])
	if len(got) != len(want) {
		t.Fatalf("read back %d packets, the file sink wrote %d", len(got), len(want))
	}
	for i := range want {
		if string(got[i]) != string(want[i]) {
			t.Fatalf("packet %d differs from the file sink's", i)
		}
	}
	if n := streamMsgs(t, srv.URL()); n != batches {
		t.Errorf("stream holds %d messages for %d batches", n, batches)
	}
}

// TestNATSServerRestart kills nats-server mid-stream and starts it again
// on the same storage: every packet arrives once, every batch is stored
// once.
func TestNATSServerRestart(t *testing.T) {
	srv := startNATS(t)
	s := newTestSink(t, srv.URL(), "traces.b")
	send(t, s, nil, 0, 2000, false)
	// Kill while batches are in flight: published, not acknowledged.
	testsupport.WaitUntil(t, "a first acknowledgement", 30*time.Second, func() bool { return s.Stats().PacketsWritten > 0 })
	inFlight := s.out.Pending()
	srv.kill()
	send(t, s, nil, 2000, 3000, false) // while the server is down; fits the queue
	srv.start()
	ctx, cancel := context.WithTimeout(bg, 60*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.PacketsWritten != 3000 || st.PacketsDropped() != 0 {
		t.Fatalf("stats %+v, want 3000 acknowledged", st)
	}
	if s.nc.Stats().Reconnects == 0 {
		t.Fatal("the client never noticed the restart")
	}
	t.Logf("%d batches unacknowledged at the kill; %d publish failures, %d duplicates reported", inFlight, s.Failures.Load(), s.Duplicates.Load())
	batches := s.out.Acked()
	if n := streamMsgs(t, srv.URL()); n != batches {
		t.Errorf("stream holds %d messages for %d batches (a batch stored twice or lost)", n, batches)
	}
	got := readBack(t, srv.URL(), "traces.b", s.Identity(), batches)
	if len(got) != 3000 {
		t.Errorf("read back %d packets, want 3000", len(got))
	}
	for i, p := range got {
		info, err := tracefile.DecodePacket(p)
		if err != nil || info.Timestamp != uint64(i) {
			t.Fatalf("packet %d: timestamp %d (%v), want %d", i, info.Timestamp, err, i)
		}
	}
}

// TestNATSBeyondBound: with the server down and a 4-batch queue, what
// does not fit is dropped and counted; what is stored is every other
// packet, once and in order.
func TestNATSBeyondBound(t *testing.T) {
	srv := startNATS(t)
	s, err := New(Options{
		URL: srv.URL(), Subject: "traces.c", CreateStream: true, Stream: "T",
		Identity:   remote.Identity{Machine: 78, Session: [16]byte{7}, Hostname: "lossy"},
		BatchBytes: 4 << 10, MaxBatches: 4, AckTimeout: time.Second, CloseTimeout: 30 * time.Second,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond, Logger: testsupport.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	send(t, s, nil, 0, 500, true)
	testsupport.WaitUntil(t, "the first batches acknowledged", 30*time.Second, func() bool { return s.Stats().PacketsWritten > 0 })
	srv.kill()
	send(t, s, nil, 500, 1500, false)
	srv.start()
	if err := s.Close(bg); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	// Dropped while the server was down: lost to the outage (which
	// fails the sink), not to a full queue.
	if st.PacketsDroppedError == 0 || st.PacketsDroppedQueue != 0 || s.Failed() == nil {
		t.Fatalf("stats %+v, failed %v: want the outage's drops counted as lost to it", st, s.Failed())
	}
	got := readBack(t, srv.URL(), "traces.c", s.Identity(), s.out.Acked())
	if uint64(len(got))+st.PacketsDroppedError != 1500 || uint64(len(got)) != st.PacketsWritten {
		t.Errorf("%d stored + %d counted dropped != 1500 (written %d)", len(got), st.PacketsDroppedError, st.PacketsWritten)
	}
	prev := int64(-1)
	for i, p := range got {
		info, _ := tracefile.DecodePacket(p)
		if int64(info.Timestamp) <= prev {
			t.Fatalf("packet %d: timestamp %d after %d (duplicate or reorder)", i, info.Timestamp, prev)
		}
		prev = int64(info.Timestamp)
	}
}

// A server stopped and restarted mid-session, within what the queue
// holds: one outage line with its cause, one resumed line saying nothing
// was lost, a reconnect counted (info), no error, no failure, and every
// packet stored once.
func TestNATSOutageResumedNothingLost(t *testing.T) {
	srv := startNATS(t)
	var logs testsupport.LockedBuffer
	s, err := New(Options{
		URL: srv.URL(), Subject: "traces.o", CreateStream: true, Stream: "O",
		Identity:   remote.Identity{Machine: 79, Session: [16]byte{9}, Hostname: "outage"},
		BatchBytes: 4 << 10, MaxBatches: 512, AckTimeout: time.Second, CloseTimeout: 30 * time.Second,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	send(t, s, nil, 0, 300, true)
	testsupport.WaitUntil(t, "the first batches acknowledged", 30*time.Second, func() bool { return s.Stats().PacketsWritten == 300 })
	srv.kill()
	testsupport.WaitUntil(t, "the outage noticed", 30*time.Second, func() bool { return strings.Contains(logs.String(), "unreachable since") })
	send(t, s, nil, 300, 600, false)
	srv.start()
	testsupport.WaitUntil(t, "the outage over", 30*time.Second, func() bool { return strings.Contains(logs.String(), "resumed after") })
	if err := s.Close(bg); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if n := strings.Count(out, "unreachable since"); n != 1 {
		t.Errorf("%d outage lines, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "resumed after"); n != 1 || !strings.Contains(out, "nothing lost") {
		t.Errorf("%d resumed lines, want 1 saying nothing lost:\n%s", n, out)
	}
	if !strings.Contains(out, "connection refused") && !strings.Contains(out, "closed the connection") && !strings.Contains(out, "connection reset") {
		t.Errorf("the outage line gives no cause:\n%s", out)
	}
	st := s.Stats()
	if st.PacketsWritten != 600 || st.PacketsDropped() != 0 || st.Errors != 0 || st.Reconnects != 1 || s.Failed() != nil {
		t.Errorf("stats %+v, failed %v: want 600 written, one reconnect, no loss, no error", st, s.Failed())
	}
	if got := readBack(t, srv.URL(), "traces.o", s.Identity(), s.out.Acked()); len(got) != 600 {
		t.Errorf("read back %d packets, want 600", len(got))
	}
}

// No stream listens on the subject: the sink fails at once with a cause
// that names the subject, and what it could not deliver is lost to that
// failure, not to a full queue.
func TestNATSNoStreamFails(t *testing.T) {
	srv := startNATS(t)
	s, err := New(Options{URL: srv.URL(), Subject: "nostream.z", Identity: remote.Identity{Machine: 80, Hostname: "nostream"},
		BatchBytes: 4 << 10, MaxBatches: 4, AckTimeout: time.Second, CloseTimeout: 200 * time.Millisecond,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	send(t, s, nil, 0, 20, true)
	testsupport.WaitUntil(t, "the sink failed", 30*time.Second, func() bool { return s.Failed() != nil })
	if err := s.Failed(); !strings.Contains(err.Error(), `no JetStream stream listens on subject "nostream.z"`) {
		t.Errorf("failure %q does not name the missing stream", err)
	}
	if err := s.Close(bg); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.PacketsWritten != 0 || st.PacketsDroppedError != 20 || st.PacketsDroppedQueue != 0 {
		t.Errorf("stats %+v: want the 20 packets lost to the failure", st)
	}
}

// A server that requires credentials the sink does not have: the sink
// fails at once, its cause says authentication, and nothing is written.
func TestNATSAuthRefusedFails(t *testing.T) {
	srv := startNATS(t)
	srv.kill()
	srv.cmd = exec.Command(srv.bin, "-js", "-a", "127.0.0.1", "-p", fmt.Sprint(srv.port), "-sd", filepath.Join(srv.dir, "js"), "--user", "u", "--pass", "secret")
	if err := srv.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testsupport.WaitUntil(t, "nats-server with auth listening", 20*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", srv.port), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	s, err := New(Options{URL: srv.URL(), Subject: "auth.z", CreateStream: true, Identity: remote.Identity{Machine: 81, Hostname: "auth"},
		CloseTimeout: 100 * time.Millisecond, BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	if err != nil {
		if !strings.Contains(err.Error(), "authorization") {
			t.Fatalf("New: %v", err)
		}
		t.Logf("refused at connect: %v", err)
		return // as clear as a failure
	}
	send(t, s, nil, 0, 10, false)
	testsupport.WaitUntil(t, "the sink failed", 30*time.Second, func() bool { return s.Failed() != nil })
	if err := s.Failed(); !strings.Contains(err.Error(), "authentication refused") {
		t.Errorf("failure %q does not say authentication", err)
	}
	if err := s.Close(bg); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.PacketsWritten != 0 || st.PacketsDroppedError != 10 {
		t.Errorf("stats %+v: want the 10 packets lost to the failure", st)
	}
}
