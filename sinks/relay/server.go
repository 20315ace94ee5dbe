package relay

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/sinks/remote"
)

// ServerOptions configure a Server. Zero durations and sizes take the
// Default* values (budget.go).
type ServerOptions struct {
	Store *remote.Store
	// TLS, when set, wraps every accepted connection (set ClientAuth and
	// ClientCAs to require client certificates).
	TLS *tls.Config
	// MaxConns bounds the connections served at once; more are refused
	// with an error frame.
	MaxConns int
	// HelloTimeout bounds the TLS handshake and the hello together.
	HelloTimeout time.Duration
	// IdleTimeout bounds the silence between two frames after the hello:
	// a connection that sends nothing for this long is closed (its
	// sender reconnects when it has batches again).
	IdleTimeout time.Duration
	// FrameTimeout bounds one frame once its header arrived: waiting for
	// frame memory and reading its payload.
	FrameTimeout time.Duration
	// WriteTimeout bounds each write to the sender (hello ack, acks): a
	// sender that does not read its acks is cut off.
	WriteTimeout time.Duration
	// FrameMemory bounds the frame buffers of all connections together;
	// a frame that finds no room within its FrameTimeout ends its
	// connection.
	FrameMemory int64
	// Logger receives one line per connection event. Nil discards.
	Logger *slog.Logger
}

// ServerStats counts what a Server did. Safe to read at any time.
type ServerStats struct {
	RefusedConnLimit atomic.Uint64 // connections refused at MaxConns
	EvictedIdle      atomic.Uint64 // idle connections closed to make room at MaxConns
	RefusedMemory    atomic.Uint64 // frames that found no room in FrameMemory
	RefusedBatches   atomic.Uint64 // batches the store refused (a limit)
	TimeoutHello     atomic.Uint64 // connections that did not say hello in time
	TimeoutIdle      atomic.Uint64 // connections idle past IdleTimeout
	TimeoutFrame     atomic.Uint64 // frames not complete within FrameTimeout
	TimeoutWrite     atomic.Uint64 // writes (acks) not taken within WriteTimeout
	SessionsStarted  atomic.Uint64 // hellos accepted
	SessionsEnded    atomic.Uint64
}

// Server accepts relay senders and stores their batches.
type Server struct {
	opts ServerOptions

	Connections atomic.Int64  // open now
	Accepted    atomic.Uint64 // since start
	Rejected    atomic.Uint64 // ended by a protocol, TLS, limit or timeout error
	Stats       ServerStats

	budget *memBudget
	once   [4]atomic.Bool // limits logged once: conns, memory, timeouts, evictions

	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]*connInfo
	closed bool
	wg     sync.WaitGroup
}

// NewServer returns a server storing into opts.Store.
func NewServer(opts ServerOptions) *Server {
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.HelloTimeout <= 0 {
		opts.HelloTimeout = DefaultHelloTimeout
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.FrameTimeout <= 0 {
		opts.FrameTimeout = DefaultFrameTimeout
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.FrameMemory <= 0 {
		opts.FrameMemory = DefaultFrameMemory
	}
	return &Server{opts: opts, conns: map[net.Conn]*connInfo{}, budget: newMemBudget(opts.FrameMemory)}
}

// Options returns the server's options with the defaults filled in.
func (s *Server) Options() ServerOptions { return s.opts }

// FrameMemoryUsed is the bytes of frame buffers in use now.
func (s *Server) FrameMemoryUsed() int64 { return s.budget.Used() }

func (s *Server) logf(format string, args ...any) {
	sinks.Logf(s.opts.Logger, slog.LevelInfo, format, args...)
}

// limitOnce logs the first time a limit is hit.
func (s *Server) limitOnce(i int, format string, args ...any) {
	if s.once[i].CompareAndSwap(false, true) {
		sinks.Logf(s.opts.Logger, slog.LevelWarn, format+" (logged once; counted in /metrics)", args...)
	}
}

// Serve accepts connections on ln until Close; it returns nil after Close.
func (s *Server) Serve(ln net.Listener) error {
	if s.opts.TLS != nil {
		ln = tls.NewListener(ln, s.opts.TLS)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.ln = ln
	s.mu.Unlock()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, errTooManyFiles) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return fmt.Errorf("relay: accept: %w", err)
		}
		delay = 0
		if s.Connections.Load() >= int64(s.opts.MaxConns) && !s.evictIdle() {
			s.Rejected.Add(1)
			s.Stats.RefusedConnLimit.Add(1)
			s.limitOnce(0, "relay: %d connections open, the limit (--max-conns); refusing %s", s.opts.MaxConns, c.RemoteAddr())
			go func() { // never block the accept loop on a slow peer
				_ = s.refuse(c, fmt.Errorf("relay: receiver at its limit of %d connections", s.opts.MaxConns))
				c.Close()
			}()
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		ci := &connInfo{}
		s.conns[c] = ci
		s.wg.Add(1)
		s.mu.Unlock()
		s.Accepted.Add(1)
		s.Connections.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.Connections.Add(-1)
			if err := s.handle(c, ci); err != nil {
				s.Rejected.Add(1)
				// Limits and timeouts are counted and logged once; a
				// session's end has its own line.
				var q quietError
				if !errors.As(err, &q) {
					sinks.Logf(s.opts.Logger, slog.LevelWarn, "relay: %s: %v", c.RemoteAddr(), err)
				}
			}
			c.Close()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// Close stops accepting, ends every connection and waits for their
// handlers (each ends within one file write).
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	s.budget.close()
	var err error
	if s.ln != nil {
		err = s.ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// session is what one connection stored, for its end-of-session line.
type session struct {
	batches, packets, dups, refused uint64
	bytes                           uint64
}

// connInfo is what the accept loop knows of a connection's activity.
type connInfo struct {
	// idleSince is when the connection began waiting for its next frame
	// after the hello (unix ns); 0 before the hello and inside a frame.
	idleSince atomic.Int64
	evicted   atomic.Bool
}

// minIdleEvict: a connection idle at least this long may be closed to
// make room for a new one at MaxConns.
const minIdleEvict = time.Second

// evictIdle closes the connection idle the longest (at least
// minIdleEvict), so that connections that said hello and went quiet
// never lock out a sender; it reports whether it closed one. The sender
// of an evicted connection reconnects when it has batches, as after an
// idle timeout.
func (s *Server) evictIdle() bool {
	cutoff := time.Now().Add(-minIdleEvict).UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	var victim net.Conn
	var vi *connInfo
	oldest := cutoff
	for c, ci := range s.conns {
		if t := ci.idleSince.Load(); t != 0 && t <= oldest && !ci.evicted.Load() {
			victim, vi, oldest = c, ci, t
		}
	}
	if victim == nil {
		return false
	}
	vi.evicted.Store(true)
	victim.Close()
	s.Stats.EvictedIdle.Add(1)
	s.limitOnce(3, "relay: %d connections open, the limit (--max-conns): closing the connection idle longest (%s, idle %s) to make room", s.opts.MaxConns, victim.RemoteAddr(), time.Since(time.Unix(0, oldest)).Round(time.Millisecond))
	return true
}

// handle runs one connection: hello, then batches until the sender hangs
// up. Errors about the peer's input are also sent to it. Every read has a
// deadline (hello, idle, frame) and every write one (WriteTimeout).
func (s *Server) handle(c net.Conn, ci *connInfo) error {
	_ = c.SetReadDeadline(time.Now().Add(s.opts.HelloTimeout))
	sr := newServerReader(c, s.budget, s.opts.FrameTimeout)
	sr.onHeader = func() { ci.idleSince.Store(0) }
	defer sr.release()
	if tc, ok := c.(*tls.Conn); ok {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.HelloTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			return s.classify(fmt.Errorf("TLS handshake: %w", err), phaseHello)
		}
	}
	typ, p, err := sr.next()
	if err != nil {
		return s.classify(fmt.Errorf("reading hello: %w", err), phaseHello)
	}
	if typ != frameHello {
		return s.refuse(c, fmt.Errorf("%w: first frame has type %d, want hello", ErrProtocol, typ))
	}
	h, err := DecodeHello(p)
	if err != nil {
		return s.refuse(c, err)
	}
	if h.Version < MinProtocolVersion || h.Version > ProtocolVersion {
		return s.refuse(c, fmt.Errorf("%w: protocol version %d, this receiver speaks %d to %d", ErrProtocol, h.Version, MinProtocolVersion, ProtocolVersion))
	}
	st, err := s.opts.Store.Stream(h.ID)
	if err != nil {
		return s.refuse(c, err)
	}
	defer st.Release()
	last := st.LastSeq()
	out := appendHelloAck(make([]byte, 0, 32), last)
	if err := s.write(c, out); err != nil {
		return fmt.Errorf("writing hello ack: %w", err)
	}
	who := fmt.Sprintf("session %s of %s (machine %016x)", h.ID.SessionString(), h.ID.Hostname, h.ID.Machine)
	if sn := h.ID.Snapshot; !sn.IsZero() {
		who = fmt.Sprintf("snapshot %d (trigger %q) of session %x of %q (machine %016x)", sn.N, sn.Trigger, sn.Of, h.ID.Hostname, h.ID.Machine)
	}
	s.Stats.SessionsStarted.Add(1)
	s.logf("relay: %s: %s started (stored up to batch %d)", c.RemoteAddr(), who, last)
	var sess session
	start := time.Now()
	cs := newClockSyncReceiver(st, s.opts.Logger, c.RemoteAddr().String(), s.opts.WriteTimeout) // clocksync.go
	err = s.serveBatches(c, ci, sr, st, cs, &sess, out)
	if err != nil && ci.evicted.Load() {
		err = fmt.Errorf("closed to make room for a new connection at the limit of %d (--max-conns)", s.opts.MaxConns)
	}
	s.Stats.SessionsEnded.Add(1)
	why := "sender closed the connection"
	if err != nil {
		why = err.Error()
	}
	if err != nil {
		err = quietError{err}
	}
	s.logf("relay: %s: %s ended after %s: %d batches, %d packets, %d bytes stored, %d duplicates, %d refused, last batch %d (%s)",
		c.RemoteAddr(), who, time.Since(start).Round(time.Millisecond), sess.batches, sess.packets, sess.bytes, sess.dups, sess.refused, st.LastSeq(), why)
	return err
}

// serveBatches stores batches until the sender hangs up or fails.
func (s *Server) serveBatches(c net.Conn, ci *connInfo, sr *serverReader, st *remote.Stream, cs *clockSyncReceiver, sess *session, out []byte) error {
	for {
		sr.phase = phaseIdle
		ci.idleSince.Store(time.Now().UnixNano())
		_ = c.SetReadDeadline(time.Now().Add(s.opts.IdleTimeout))
		typ, p, err := sr.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			if errors.Is(err, ErrProtocol) {
				return s.refuse(c, err)
			}
			if errors.Is(err, errFrameMemory) {
				s.Stats.RefusedMemory.Add(1)
				s.limitOnce(1, "relay: frame memory budget of %d bytes (--frame-memory) full; %s waited past its frame timeout", s.opts.FrameMemory, c.RemoteAddr())
				return s.refuse(c, err)
			}
			return s.classify(err, sr.phase)
		}
		switch typ {
		case frameBatch:
			cs.batch()
			seq, recs, packets, nbytes, err := DecodeBatch(p)
			if err != nil {
				return s.refuse(c, err)
			}
			stored, err := st.Append(seq, recs, packets, nbytes)
			if err != nil {
				if errors.Is(err, remote.ErrRefused) {
					sess.refused++
					s.Stats.RefusedBatches.Add(1)
				}
				return s.refuse(c, err)
			}
			if stored {
				sess.batches++
				sess.packets += uint64(packets)
				sess.bytes += nbytes
			} else {
				sess.dups++
			}
			sr.release()
			out = appendSeqFrame(out[:0], frameAck, seq)
			if err := s.write(c, out); err != nil {
				return fmt.Errorf("writing ack: %w", err)
			}
		case frameClockSync:
			if err := cs.frame(c, p); err != nil {
				if errors.Is(err, ErrProtocol) {
					return s.refuse(c, err)
				}
				return err
			}
		case frameError:
			return fmt.Errorf("sender: %s", errorText(p))
		default:
			return s.refuse(c, fmt.Errorf("%w: unexpected frame type %d after hello", ErrProtocol, typ))
		}
	}
}

// write writes b within WriteTimeout, counting a timeout.
func (s *Server) write(c net.Conn, b []byte) error {
	_ = c.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
	_, err := c.Write(b)
	if err != nil {
		return s.classify(err, phaseWrite)
	}
	return nil
}

// classify counts err when it is a deadline and says which.
func (s *Server) classify(err error, ph phase) error {
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return err
	}
	var what string
	var d time.Duration
	switch ph {
	case phaseHello:
		s.Stats.TimeoutHello.Add(1)
		what, d = "hello timeout (--hello-timeout)", s.opts.HelloTimeout
	case phaseIdle:
		s.Stats.TimeoutIdle.Add(1)
		what, d = "idle timeout (--idle-timeout)", s.opts.IdleTimeout
	case phaseFrame:
		s.Stats.TimeoutFrame.Add(1)
		what, d = "frame timeout (--frame-timeout)", s.opts.FrameTimeout
	case phaseWrite:
		s.Stats.TimeoutWrite.Add(1)
		what, d = "write timeout (--write-timeout): the sender does not read its acks", s.opts.WriteTimeout
	}
	s.limitOnce(2, "relay: a connection hit the %s of %s", what, d)
	return quietError{fmt.Errorf("%s of %s passed: %w", what, d, err)}
}

// quietError is an error the connection's handler does not log: it was
// counted (and logged once), or the session's end line names it.
type quietError struct{ error }

func (q quietError) Unwrap() error { return q.error }

// refuse tells the peer why the connection ends and returns err.
func (s *Server) refuse(c net.Conn, err error) error {
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write(appendErrorFrame(nil, err.Error()))
	return err
}
