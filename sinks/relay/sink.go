package relay

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/sinks/remote"
	"github.com/tracepipe/tracepipe/tracefile"
)

// Options configure a relay Sink. Zero values take the defaults below.
type Options struct {
	Address    string      // host:port of `tracepipe serve`
	TLS        *tls.Config // nil: plain TCP
	Identity   remote.Identity
	BatchBytes int // seal a batch at this size (default 256 KiB)
	MaxBatches int // unacknowledged batches kept, the open one included (default 64)
	// BackoffMin and BackoffMax bound the reconnect delay, which doubles
	// after each failed attempt and is jittered by ±50 %.
	BackoffMin, BackoffMax time.Duration
	DialTimeout            time.Duration // connect and hello (default 5 s)
	// FirstContactTimeout: how long the receiver may be unreachable
	// before it was ever reached, after which the sink fails (default
	// sinks.DefaultFirstContactTimeout; see sinks.Link).
	FirstContactTimeout time.Duration
	// CloseTimeout bounds how long Close waits for acknowledgements
	// (default 5 s), so that an unreachable receiver delays the end of a
	// session by at most this much.
	CloseTimeout time.Duration
	Logger       *slog.Logger
	// ClockSyncPeriod is the time between clock-sync rounds after the one
	// that opens each connection (0: DefaultClockSyncPeriod; < 0: no
	// clock sync, as a sender before protocol version 3). See clocksync.go.
	ClockSyncPeriod time.Duration
	// clocks reads the clocks of a round (nil: remote.ReadClocks); tests
	// skew it to play a machine whose clocks differ.
	clocks func([]tracefile.Clock) []tracefile.Clock
	// afterWrite, when set, runs in Write between the outbox taking (or
	// dropping) the packets and the link classifying the drops; tests
	// use it to play a transport that changes the link's state there.
	afterWrite func()
}

// Defaults of Options.
const (
	DefaultBackoffMin  = 50 * time.Millisecond
	DefaultBackoffMax  = 5 * time.Second
	DefaultDialTimeout = 5 * time.Second
	// DefaultCloseTimeout: see Options.CloseTimeout.
	DefaultCloseTimeout = 5 * time.Second
)

// writeStallTimeout bounds one batch write; past it the connection is
// considered stalled and the sink reconnects (and resends).
const writeStallTimeout = 30 * time.Second

// Sink sends packets to a relay server. Write never blocks: it packs
// packets into the outbox, whose bound decides what is dropped (and
// counted) while the receiver is away; one goroutine connects, resends
// what is unacknowledged and streams new batches.
//
// Stats: PacketsWritten counts packets the receiver acknowledged as
// stored; packets still in flight are in no counter until Close, which
// counts what was never acknowledged as lost (PacketsDroppedError, and
// the sink fails). Drops at the queue bound are PacketsDroppedQueue while
// the receiver acknowledges, PacketsDroppedError during an outage (see
// sinks.Link).
type Sink struct {
	opts Options
	out  *remote.Outbox
	link *sinks.Link // outages, failure, loss classification

	Connects atomic.Uint64 // successful hellos
	Failures atomic.Uint64 // failed connections or sessions

	clock ClockSyncStats

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	closeOnce sync.Once
}

var _ sinks.Sink = (*Sink)(nil)

// New starts a relay sink; it connects in the background.
func New(opts Options) (*Sink, error) {
	if opts.Address == "" {
		return nil, errors.New("relay: `address` is required")
	}
	if _, _, err := net.SplitHostPort(opts.Address); err != nil {
		return nil, fmt.Errorf("relay: `address`: %w", err)
	}
	if opts.BackoffMin <= 0 {
		opts.BackoffMin = DefaultBackoffMin
	}
	if opts.BackoffMax <= 0 {
		opts.BackoffMax = DefaultBackoffMax
	}
	opts.BackoffMax = max(opts.BackoffMax, opts.BackoffMin)
	if opts.CloseTimeout <= 0 {
		opts.CloseTimeout = DefaultCloseTimeout
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	if opts.Identity.Machine == 0 {
		opts.Identity = remote.NewIdentity(0, opts.Identity.Hostname)
	}
	s := &Sink{opts: opts, out: remote.NewOutbox(opts.BatchBytes, opts.MaxBatches), done: make(chan struct{})}
	scheme := "tcp"
	if opts.TLS != nil {
		scheme = "tls"
	}
	s.link = sinks.NewLink(fmt.Sprintf("relay %s://%s", scheme, opts.Address), opts.Logger)
	s.link.SetFirstContactTimeout(opts.FirstContactTimeout)
	// The link reads the outbox's drops itself when the transport reports
	// the receiver gone or back, so that a drop counted before that is
	// classified by the state before it, even when the Write that made it
	// has not reported it yet; and an acknowledgement excuses only the
	// drops counted before the batch it acknowledges was sealed.
	s.link.SetCounters(s.out.Counters)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	go s.run()
	return s, nil
}

// Identity is what the sink announces in its hello.
func (s *Sink) Identity() remote.Identity { return s.opts.Identity }

// QueueDepth is the number of batches held (unacknowledged or open).
func (s *Sink) QueueDepth() int { return s.out.Depth() }

func (s *Sink) logf(format string, args ...any) {
	sinks.Logf(s.opts.Logger, slog.LevelWarn, format, args...)
}

// WriteLast queues the final TraceStats even when the queue is at its
// bound (sinks.LastWriter; see [remote.Outbox.WriteLast]).
func (s *Sink) WriteLast(packet []byte) error {
	err := s.out.WriteLast(packet)
	s.link.NoteDrops(s.out.Stats())
	return err
}

// Write packs packets into batches; see [remote.Outbox.Write]. Packets
// dropped at the queue bound while the receiver is unreachable are lost
// to it (and fail the sink), not to a full queue.
func (s *Sink) Write(_ context.Context, packets [][]byte) error {
	err := s.out.Write(packets)
	if s.opts.afterWrite != nil {
		s.opts.afterWrite()
	}
	s.link.NoteDrops(s.out.Stats())
	return err
}

// Failed reports why the sink cannot deliver, or nil (sinks.Failer).
func (s *Sink) Failed() error { return s.link.Failed() }

// Outage reports why the receiver is unreachable now, or nil.
func (s *Sink) Outage() error { return s.link.Cause() }

// lost is the outbox's count of lost packets.
func (s *Sink) lost() uint64 {
	st := s.out.Stats()
	return st.PacketsDroppedQueue + st.PacketsDroppedError
}

// Flush seals the open batch so it is sent now. It does not wait for the
// receiver: a missing receiver must not stall the pipeline.
func (s *Sink) Flush(context.Context) error {
	s.out.Seal()
	return nil
}

// Close sends what is queued and waits, bounded by ctx and CloseTimeout, until the
// receiver acknowledged it; what is left is counted as dropped (a loss
// in the stats, not an error).
func (s *Sink) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		// Batches never acknowledged are lost (PacketsDroppedError) and
		// fail the sink: Close returns no error, the lane reports the
		// failure (Failed) and the session its TraceStats.
		if n := s.out.Shutdown(ctx, s.opts.CloseTimeout, func() { s.cancel(); <-s.done }); n > 0 {
			why := s.link.Cause()
			if why == nil {
				why = fmt.Errorf("the receiver did not acknowledge them within close_timeout %v", s.opts.CloseTimeout)
			}
			s.link.Fail(fmt.Errorf("%d batches never acknowledged: %w", n, why))
			s.logf("relay: %s: gave up at close with %d batches unacknowledged; their packets are counted as lost", s.opts.Address, n)
		}
		s.link.NoteDrops(s.out.Stats())
	})
	return nil
}

// ClockSync returns the sink's clock-sync counters.
func (s *Sink) ClockSync() *ClockSyncStats { return &s.clock }

// Stats returns the outbox's counters as the link classifies them
// (sinks.Link.Adjust).
func (s *Sink) Stats() sinks.SinkStats { return s.link.Adjust(s.out.Stats()) }

// run connects and reconnects until the sink is closed.
func (s *Sink) run() {
	defer close(s.done)
	backoff := s.opts.BackoffMin
	for s.ctx.Err() == nil {
		helloed, err := s.session()
		if s.ctx.Err() != nil {
			return
		}
		if helloed {
			backoff = s.opts.BackoffMin
		}
		// An outage, logged once by the link; what it costs is counted
		// when packets are dropped (Write), not per failed attempt.
		s.Failures.Add(1)
		s.link.Down(cause(err, helloed, s.opts.TLS != nil), s.lost())
		// ±50 % jitter spreads the reconnects of a fleet.
		d := backoff/2 + rand.N(backoff+1)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			return
		}
		backoff = min(2*backoff, s.opts.BackoffMax)
	}
}

// session runs one connection; it reports whether the hello succeeded.
func (s *Sink) session() (bool, error) {
	d := net.Dialer{Timeout: s.opts.DialTimeout}
	var c net.Conn
	var err error
	if s.opts.TLS != nil {
		td := tls.Dialer{NetDialer: &d, Config: s.opts.TLS}
		if c, err = td.DialContext(s.ctx, "tcp", s.opts.Address); err != nil {
			err = handshakeError{err}
		}
	} else {
		c, err = d.DialContext(s.ctx, "tcp", s.opts.Address)
	}
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithCancelCause(s.ctx)
	defer cancel(nil)
	go func() { // unblocks reads and writes when the session ends
		<-ctx.Done()
		c.Close()
	}()
	_ = c.SetDeadline(time.Now().Add(s.opts.DialTimeout))
	if _, err := c.Write(appendHello(nil, Hello{Version: helloVersion(s.opts.Identity), ID: s.opts.Identity})); err != nil {
		return false, fmt.Errorf("hello: %w", err)
	}
	fr := newFrameReader(c)
	typ, p, err := fr.next()
	if err != nil {
		return false, fmt.Errorf("hello: %w", err)
	}
	switch typ {
	case frameHelloAck:
	case frameError:
		return false, fmt.Errorf("%w: %s", errRefused, errorText(p))
	default:
		return false, fmt.Errorf("%w: answer to hello has type %d", ErrProtocol, typ)
	}
	if len(p) != 10 {
		return false, fmt.Errorf("%w: hello ack of %d bytes, want 10", ErrProtocol, len(p))
	}
	ver := binary.BigEndian.Uint16(p)
	last, _ := decodeSeq("hello ack", p[2:])
	if sealed := s.out.Sealed(); last > sealed {
		// Trusting it would make the receiver drop our next batches as
		// duplicates.
		return false, fmt.Errorf("%w: receiver claims batch %d of this session, only %d were sent", ErrProtocol, last, sealed)
	}
	_ = c.SetDeadline(time.Time{})
	s.Connects.Add(1)
	s.out.Ack(last)
	// The outage ends (Up: "resumed", a reconnect) when the receiver
	// takes data, not when it answers the hello: one that dies or
	// refuses the batches right after it has not come back. The hello
	// ack suffices when it says every batch sent is stored.
	up := s.out.Pending() == 0
	if up {
		s.link.Up(s.lost())
	}
	var sent atomic.Uint64 // highest batch written on this connection
	sent.Store(last)
	cs := s.newClockSyncer(ver) // clocksync.go; nil without clock sync
	defer cs.stop()

	go func() { // acks
		for {
			typ, p, err := fr.next()
			if err != nil {
				cancel(err)
				return
			}
			switch typ {
			case frameAck:
				seq, err := decodeSeq("ack", p)
				if err == nil && seq > sent.Load() {
					err = fmt.Errorf("%w: ack of batch %d, only %d were sent", ErrProtocol, seq, sent.Load())
				}
				if err != nil {
					cancel(err)
					return
				}
				s.out.Ack(seq)
				if !up {
					up = true
					s.link.Up(s.lost())
				}
				s.link.AckedUpTo(seq)
			case frameClockPong:
				if err := cs.pong(p); err != nil {
					cancel(err)
					return
				}
			case frameError:
				cancel(fmt.Errorf("receiver: %s", errorText(p)))
				return
			default:
				cancel(fmt.Errorf("%w: unexpected frame type %d", ErrProtocol, typ))
				return
			}
		}
	}()

	var hdr [frameHeaderSize + 8]byte
	arr := make([][]byte, 2)
	next := last + 1
	round := true // a clock-sync round opens the connection
	for {
		if round || cs.due() {
			round = false
			if err := cs.run(ctx, c); err != nil {
				cancel(err)
				return true, context.Cause(ctx)
			}
		}
		b := s.out.Next(next)
		if b == nil {
			select {
			case <-s.out.Notify():
				continue
			case <-cs.tick():
				round = true
				continue
			case <-ctx.Done():
				return true, context.Cause(ctx)
			}
		}
		h := appendFrameHeader(hdr[:0], frameBatch, 8+len(b.Data))
		h = binary.BigEndian.AppendUint64(h, b.Seq)
		arr[0], arr[1] = h, b.Data
		// A receiver that stops reading (but keeps the connection) must
		// not hold the sender forever: reconnect instead.
		_ = c.SetWriteDeadline(time.Now().Add(writeStallTimeout))
		bufs := net.Buffers(arr) // one writev on a TCP connection
		// Before the write: the ack may arrive before WriteTo returns.
		sent.Store(b.Seq)
		_, err := bufs.WriteTo(c)
		next = b.Seq + 1
		s.out.Release(b)
		if err != nil {
			cancel(err)
			return true, context.Cause(ctx)
		}
	}
}
