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

// helloTimeout bounds how long a new connection may take to say hello.
const helloTimeout = 10 * time.Second

// ServerOptions configure a Server.
type ServerOptions struct {
	Store *remote.Store
	// TLS, when set, wraps every accepted connection (set ClientAuth and
	// ClientCAs to require client certificates).
	TLS *tls.Config
	// MaxConns bounds the connections served at once (0: 1024); more are
	// refused with an error frame. With MaxFrame it bounds the memory.
	MaxConns int
	// Logger receives one line per connection event. Nil discards.
	Logger *slog.Logger
}

// Server accepts relay senders and stores their batches.
type Server struct {
	opts ServerOptions

	Connections atomic.Int64  // open now
	Accepted    atomic.Uint64 // since start
	Rejected    atomic.Uint64 // ended by a protocol or TLS error

	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// NewServer returns a server storing into opts.Store.
func NewServer(opts ServerOptions) *Server {
	if opts.MaxConns <= 0 {
		opts.MaxConns = 1024
	}
	return &Server{opts: opts, conns: map[net.Conn]struct{}{}}
}

func (s *Server) logf(format string, args ...any) {
	sinks.Logf(s.opts.Logger, slog.LevelInfo, format, args...)
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
		if s.Connections.Load() >= int64(s.opts.MaxConns) {
			s.Rejected.Add(1)
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
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		s.Accepted.Add(1)
		s.Connections.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.Connections.Add(-1)
			if err := s.handle(c); err != nil {
				s.Rejected.Add(1)
				sinks.Logf(s.opts.Logger, slog.LevelWarn, "relay: %s: %v", c.RemoteAddr(), err)
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

// handle runs one connection: hello, then batches until the sender hangs
// up. Errors about the peer's input are also sent to it.
func (s *Server) handle(c net.Conn) error {
	_ = c.SetReadDeadline(time.Now().Add(helloTimeout))
	if tc, ok := c.(*tls.Conn); ok {
		ctx, cancel := context.WithTimeout(context.Background(), helloTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			return fmt.Errorf("TLS handshake: %w", err)
		}
	}
	fr := newFrameReader(c)
	typ, p, err := fr.next()
	if err != nil {
		return fmt.Errorf("reading hello: %w", err)
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
	_ = c.SetReadDeadline(time.Time{})
	out := appendHelloAck(make([]byte, 0, 32), st.LastSeq())
	if _, err := c.Write(out); err != nil {
		return fmt.Errorf("writing hello ack: %w", err)
	}
	if sn := h.ID.Snapshot; !sn.IsZero() {
		s.logf("relay: %s: snapshot %d (trigger %q) of session %x of %q (machine %016x)", c.RemoteAddr(), sn.N, sn.Trigger, sn.Of, h.ID.Hostname, h.ID.Machine)
	} else {
		s.logf("relay: %s: session %s of %s (machine %016x)", c.RemoteAddr(), h.ID.SessionString(), h.ID.Hostname, h.ID.Machine)
	}
	cs := newClockSyncReceiver(st, s.opts.Logger, c.RemoteAddr().String()) // clocksync.go
	for {
		typ, p, err := fr.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			if errors.Is(err, ErrProtocol) {
				return s.refuse(c, err)
			}
			return err
		}
		switch typ {
		case frameBatch:
			cs.batch()
			seq, recs, packets, nbytes, err := DecodeBatch(p)
			if err != nil {
				return s.refuse(c, err)
			}
			if _, err := st.Append(seq, recs, packets, nbytes); err != nil {
				return s.refuse(c, err)
			}
			out = appendSeqFrame(out[:0], frameAck, seq)
			if _, err := c.Write(out); err != nil {
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

// refuse tells the peer why the connection ends and returns err.
func (s *Server) refuse(c net.Conn, err error) error {
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write(appendErrorFrame(nil, err.Error()))
	return err
}
