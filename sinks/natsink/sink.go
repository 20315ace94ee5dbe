package natsink

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/sinks/remote"
)

// Message headers.
const (
	HeaderMachine = "Tracepipe-Machine" // 16 hex digits
	HeaderHost    = "Tracepipe-Host"
	HeaderSession = "Tracepipe-Session" // 32 hex digits
	HeaderSeq     = "Tracepipe-Seq"     // decimal, from 1
	// A clone snapshot, a trace of its own (sinks.Snapshot), carries all
	// three; an ordinary session none.
	HeaderSnapshotOf = "Tracepipe-Snapshot-Of" // the live session: 32 hex digits
	HeaderSnapshot   = "Tracepipe-Snapshot"    // the snapshot's number, decimal, from 1
	HeaderTrigger    = "Tracepipe-Trigger"     // the trigger's name, at most 255 bytes
)

// Options configure a nats Sink. Zero values take defaults.
type Options struct {
	URL     string // nats://host:port (comma-separated list for a cluster)
	Subject string
	// Stream, with CreateStream, is created (file storage) if no stream
	// listens on Subject yet. Default name: TRACEPIPE.
	Stream       string
	CreateStream bool
	Identity     remote.Identity
	BatchBytes   int // default 256 KiB (NATS' default max_payload is 1 MiB)
	MaxBatches   int // unacknowledged batches kept (default 64)
	MaxInflight  int // batches published and not yet acknowledged (default 16)
	AckTimeout   time.Duration
	// BackoffMin/Max bound the delay before publishing again after a
	// failure (doubling, ±50 % jitter).
	BackoffMin, BackoffMax time.Duration
	// CloseTimeout bounds how long Close waits for acknowledgements
	// (default 5 s).
	CloseTimeout time.Duration
	// FirstContactTimeout: how long JetStream may be unreachable before
	// it ever acknowledged, after which the sink fails (default
	// sinks.DefaultFirstContactTimeout; see sinks.Link).
	FirstContactTimeout time.Duration
	Logger              *slog.Logger
}

// DefaultStream is the stream name a sink creates when none is given.
const DefaultStream = "TRACEPIPE"

// Defaults of the Options a zero value leaves to the sink.
const (
	DefaultMaxInflight  = 16
	DefaultAckTimeout   = 5 * time.Second
	DefaultCloseTimeout = 5 * time.Second
	DefaultBackoffMin   = 50 * time.Millisecond
	DefaultBackoffMax   = 5 * time.Second
)

// Sink publishes batches to JetStream. Write never blocks (see
// remote.Outbox); one goroutine publishes with up to MaxInflight
// acknowledgements pending and, after any failure, publishes again from
// the oldest unacknowledged batch (the Nats-Msg-Id makes that safe).
type Sink struct {
	opts Options
	out  *remote.Outbox
	nc   *nats.Conn
	js   jetstream.JetStream
	link *sinks.Link   // outages, failure, loss classification
	conn chan struct{} // capacity 1: the connection came up

	Duplicates atomic.Uint64 // publishes the stream reported as duplicates
	Failures   atomic.Uint64

	ctx       context.Context
	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

var _ sinks.Sink = (*Sink)(nil)

// New connects (in the background when the server is not up yet) and
// starts publishing.
func New(opts Options) (*Sink, error) {
	if opts.URL == "" || opts.Subject == "" {
		return nil, errors.New("natsink: url and subject are required")
	}
	if opts.Stream == "" {
		opts.Stream = DefaultStream
	}
	if opts.MaxInflight <= 0 {
		opts.MaxInflight = DefaultMaxInflight
	}
	if opts.AckTimeout <= 0 {
		opts.AckTimeout = DefaultAckTimeout
	}
	if opts.CloseTimeout <= 0 {
		opts.CloseTimeout = DefaultCloseTimeout
	}
	if opts.BackoffMin <= 0 {
		opts.BackoffMin = DefaultBackoffMin
	}
	if opts.BackoffMax <= 0 {
		opts.BackoffMax = DefaultBackoffMax
	}
	opts.BackoffMax = max(opts.BackoffMax, opts.BackoffMin)
	if opts.Identity.Machine == 0 {
		opts.Identity = remote.NewIdentity(0, opts.Identity.Hostname)
	}
	s := &Sink{opts: opts, out: remote.NewOutbox(opts.BatchBytes, opts.MaxBatches), done: make(chan struct{}), conn: make(chan struct{}, 1)}
	s.link = sinks.NewLink(opts.URL+" subject "+opts.Subject, opts.Logger)
	s.link.SetFirstContactTimeout(opts.FirstContactTimeout)
	// The link reads the outbox's counters itself: every drop at the
	// queue bound is classified by the state the link was in when it
	// happened, and an acknowledgement excuses only the drops counted
	// before the batch it acknowledges was sealed (as the relay sink's).
	s.link.SetCounters(s.out.Counters)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	up := func(*nats.Conn) {
		select {
		case s.conn <- struct{}{}:
		default:
		}
	}
	down := func(_ *nats.Conn, err error) { s.down(err) }
	nc, err := nats.Connect(opts.URL,
		nats.Name("tracepipe "+opts.Identity.Hostname),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(opts.BackoffMin),
		nats.ReconnectJitter(opts.BackoffMin, opts.BackoffMin),
		// No hidden buffer while disconnected: the outbox is the one
		// bounded queue, and it resends what was not acknowledged.
		nats.ReconnectBufSize(-1),
		nats.ConnectHandler(up),
		nats.ReconnectHandler(up),
		nats.DisconnectErrHandler(down),
		nats.ReconnectErrHandler(down),
	)
	if err != nil {
		s.cancel()
		return nil, fmt.Errorf("natsink: %s: %w", opts.URL, err)
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(opts.MaxInflight),
		jetstream.WithPublishAsyncTimeout(opts.AckTimeout),
	)
	if err != nil {
		s.cancel()
		nc.Close()
		return nil, fmt.Errorf("natsink: %w", err)
	}
	s.nc, s.js = nc, js
	go s.run()
	return s, nil
}

// Identity is what the sink puts in its headers.
func (s *Sink) Identity() remote.Identity { return s.opts.Identity }

// QueueDepth is the number of batches held (unacknowledged or open).
func (s *Sink) QueueDepth() int { return s.out.Depth() }

// WriteLast queues the final TraceStats even when the queue is at its
// bound (sinks.LastWriter; see [remote.Outbox.WriteLast]).
func (s *Sink) WriteLast(packet []byte) error {
	err := s.out.WriteLast(packet)
	s.link.NoteDrops(s.out.Stats())
	return err
}

// Write packs packets into batches; see [remote.Outbox.Write]. Packets
// dropped at the queue bound while JetStream is unreachable are lost to
// it (and fail the sink), not to a full queue.
func (s *Sink) Write(_ context.Context, packets [][]byte) error {
	err := s.out.Write(packets)
	s.link.NoteDrops(s.out.Stats())
	return err
}

// Failed reports why the sink cannot deliver, or nil (sinks.Failer).
func (s *Sink) Failed() error { return s.link.Failed() }

// Outage reports why JetStream is unreachable now, or nil.
func (s *Sink) Outage() error { return s.link.Cause() }

// lost is the outbox's count of lost packets.
func (s *Sink) lost() uint64 {
	st := s.out.Stats()
	return st.PacketsDroppedQueue + st.PacketsDroppedError
}

// down records an outage caused by err (or by what took the connection
// down, when err only says it is down).
func (s *Sink) down(err error) {
	if s.ctx.Err() != nil {
		return // Close ended the connection
	}
	c := cause(err, s.opts.Subject, s.opts.AckTimeout.String())
	if c == nil {
		if c = s.link.Cause(); c == nil {
			if errors.Is(err, nats.ErrNoServers) {
				return // the attempt's own error (refused, TLS, ...) follows
			}
			c = errors.New("connection lost")
		}
	}
	s.link.Down(c, s.lost())
}

// Flush seals the open batch; it does not wait for JetStream.
func (s *Sink) Flush(context.Context) error {
	s.out.Seal()
	return nil
}

// Close publishes what is queued and waits, bounded by ctx, for its
// acknowledgements (bounded by ctx and CloseTimeout); what is left is
// counted as dropped (a loss in the stats, not an error).
func (s *Sink) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		stop := func() {
			s.cancel()
			<-s.done
			s.nc.Close()
		}
		// Batches never acknowledged are lost (PacketsDroppedError) and
		// fail the sink: Close returns no error, the lane reports the
		// failure (Failed) and the session its TraceStats.
		if n := s.out.Shutdown(ctx, s.opts.CloseTimeout, stop); n > 0 {
			why := s.link.Cause()
			if why == nil {
				why = fmt.Errorf("JetStream did not acknowledge them within close_timeout %v", s.opts.CloseTimeout)
			}
			s.link.Fail(fmt.Errorf("%d batches never acknowledged: %w", n, why))
			s.logf("natsink: %s: gave up at close with %d batches unacknowledged; their packets are counted as lost", s.opts.Subject, n)
		}
		s.link.NoteDrops(s.out.Stats())
	})
	return nil
}

// Stats returns the outbox's counters (written = acknowledged by
// JetStream) as the link classifies them (sinks.Link.Adjust).
func (s *Sink) Stats() sinks.SinkStats { return s.link.Adjust(s.out.Stats()) }

func (s *Sink) logf(format string, args ...any) {
	sinks.Logf(s.opts.Logger, slog.LevelWarn, format, args...)
}

// ensureStream creates the stream if asked and none listens on the subject.
func (s *Sink) ensureStream() error {
	ctx, cancel := context.WithTimeout(s.ctx, s.opts.AckTimeout)
	defer cancel()
	if _, err := s.js.StreamNameBySubject(ctx, s.opts.Subject); err == nil {
		return nil
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	_, err := s.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:       s.opts.Stream,
		Subjects:   []string{s.opts.Subject},
		Storage:    jetstream.FileStorage,
		Duplicates: 2 * time.Minute,
	})
	if err == nil {
		sinks.Logf(s.opts.Logger, slog.LevelInfo, "natsink: created stream %s for %s", s.opts.Stream, s.opts.Subject)
	}
	return err
}

type inflight struct {
	b *remote.Batch
	f jetstream.PubAckFuture
}

// run publishes until the sink is closed.
func (s *Sink) run() {
	defer close(s.done)
	backoff := s.opts.BackoffMin
	streamReady := !s.opts.CreateStream
	sess := s.opts.Identity.SessionString()
	machine := fmt.Sprintf("%016x", s.opts.Identity.Machine)
	var pending []inflight
	next := uint64(1)
	// fail waits for every publish in flight (each ends within
	// AckTimeout), then backs off; publishing resumes from the oldest
	// unacknowledged batch.
	fail := func(err error, firstResolved bool) bool {
		for i, p := range pending {
			if i == 0 && firstResolved {
				s.out.Release(p.b)
				continue
			}
			select {
			case <-p.f.Ok():
			case <-p.f.Err():
			case <-s.ctx.Done():
			}
			s.out.Release(p.b)
		}
		pending = pending[:0]
		next = s.out.Acked() + 1
		// An outage, logged once by the link; what it costs is counted
		// when packets are dropped (Write), not per failed attempt.
		s.Failures.Add(1)
		s.down(err)
		t := time.NewTimer(backoff/2 + rand.N(backoff+1))
		defer t.Stop()
		backoff = min(2*backoff, s.opts.BackoffMax)
		select {
		case <-t.C:
			return true
		case <-s.ctx.Done():
			return false
		}
	}
	for s.ctx.Err() == nil {
		if !s.nc.IsConnected() {
			// Publishing now would fail with a misleading error (a
			// client that never reached a server does not know it
			// supports headers); the connection's handlers record the
			// outage and its cause.
			if len(pending) > 0 { // ErrDisconnected keeps the outage's cause
				if !fail(nats.ErrDisconnected, false) {
					return
				}
				continue
			}
			t := time.NewTimer(s.opts.BackoffMax)
			select {
			case <-s.conn:
			case <-t.C:
				if !s.link.IsDown() { // no attempt reported a cause yet
					s.down(fmt.Errorf("not connected to %s", s.opts.URL))
				}
			case <-s.ctx.Done():
			}
			t.Stop()
			continue
		}
		if !streamReady {
			if err := s.ensureStream(); err != nil {
				if !fail(fmt.Errorf("creating stream %s: %w", s.opts.Stream, err), false) {
					return
				}
				continue
			}
			streamReady = true
		}
		var perr error
		for len(pending) < s.opts.MaxInflight {
			b := s.out.Next(next)
			if b == nil {
				break
			}
			seq := strconv.FormatUint(b.Seq, 10)
			msg := &nats.Msg{Subject: s.opts.Subject, Data: b.Data, Header: nats.Header{
				HeaderMachine: {machine},
				HeaderHost:    {s.opts.Identity.Hostname},
				HeaderSession: {sess},
				HeaderSeq:     {seq},
			}}
			setSnapshotHeaders(msg.Header, s.opts.Identity.Snapshot)
			f, err := s.js.PublishMsgAsync(msg, jetstream.WithMsgID(sess+"-"+seq))
			if err != nil {
				s.out.Release(b)
				perr = err
				break
			}
			pending = append(pending, inflight{b, f})
			next = b.Seq + 1
		}
		if perr != nil {
			if !fail(fmt.Errorf("publish: %w", perr), false) {
				return
			}
			continue
		}
		if len(pending) == 0 {
			select {
			case <-s.out.Notify():
			case <-s.ctx.Done():
				return
			}
			continue
		}
		p := pending[0]
		select {
		case ack := <-p.f.Ok():
			if ack.Duplicate {
				s.Duplicates.Add(1)
			}
			pending = pending[1:]
			seq := p.b.Seq
			s.out.Release(p.b)
			s.out.Ack(seq)
			s.link.Up(s.lost())
			s.link.AckedUpTo(seq)
			backoff = s.opts.BackoffMin
		case err := <-p.f.Err():
			if !fail(fmt.Errorf("batch %d: %w", p.b.Seq, err), true) {
				return
			}
		case <-s.out.Notify():
		case <-s.ctx.Done():
			for _, p := range pending {
				s.out.Release(p.b)
			}
			return
		}
	}
}

// setSnapshotHeaders marks a snapshot's messages (HeaderSnapshotOf,
// HeaderSnapshot, HeaderTrigger); the trigger name loses control
// characters, which a header value cannot hold.
func setSnapshotHeaders(h nats.Header, snap sinks.Snapshot) {
	if snap.IsZero() {
		return
	}
	trig := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '_'
		}
		return r
	}, strings.ToValidUTF8(snap.Trigger, "_"))
	for len(trig) > sinks.MaxSnapshotTrigger {
		_, n := utf8.DecodeLastRuneInString(trig)
		trig = trig[:len(trig)-n]
	}
	h[HeaderSnapshotOf] = []string{hex.EncodeToString(snap.Of[:])}
	h[HeaderSnapshot] = []string{strconv.FormatUint(uint64(snap.N), 10)}
	h[HeaderTrigger] = []string{trig}
}
