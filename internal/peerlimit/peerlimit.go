// Package peerlimit bounds the connections a local (UNIX) socket serves:
// in all and per peer uid, the uid the kernel reports for the peer
// (SO_PEERCRED), so that one local user cannot take every slot of a
// world-connectable socket. It owns the counting, the peer-credential
// lookup and a net.Listener that refuses connections over the limits. It
// must not know about the protocols served over the sockets.
package peerlimit

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Limits are the bounds of one socket. Zero fields take the defaults.
type Limits struct {
	// Max bounds the connections served at once (default DefaultMax).
	Max int
	// PerUID bounds the connections of one uid (default Max/4, at least 1).
	PerUID int
}

// DefaultMax is the default bound on a socket's connections.
const DefaultMax = 256

// withDefaults returns l with its zero fields set.
func (l Limits) withDefaults() Limits {
	if l.Max <= 0 {
		l.Max = DefaultMax
	}
	if l.PerUID <= 0 {
		l.PerUID = max(l.Max/4, 1)
	}
	l.PerUID = min(l.PerUID, l.Max)
	return l
}

// ErrLimit is matched (errors.Is) by the error Set.Add returns for a
// connection over a limit.
var ErrLimit = errors.New("connection limit")

// Set counts the connections of one socket.
type Set struct {
	lim Limits

	mu    sync.Mutex // guards total and byUID
	total int
	byUID map[uint32]int

	refused atomic.Uint64
}

// NewSet returns an empty set bounded by lim (zero fields: defaults).
func NewSet(lim Limits) *Set {
	return &Set{lim: lim.withDefaults(), byUID: map[uint32]int{}}
}

// Limits returns the bounds in force.
func (s *Set) Limits() Limits { return s.lim }

// Add counts a new connection of uid, or refuses it with an error that
// names the limit it would exceed.
func (s *Set) Add(uid uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.total >= s.lim.Max:
		s.refused.Add(1)
		return fmt.Errorf("%w: %d connections open (at most %d)", ErrLimit, s.total, s.lim.Max)
	case s.byUID[uid] >= s.lim.PerUID:
		s.refused.Add(1)
		return fmt.Errorf("%w: uid %d has %d connections open (at most %d per uid)", ErrLimit, uid, s.byUID[uid], s.lim.PerUID)
	}
	s.total++
	s.byUID[uid]++
	return nil
}

// Remove uncounts a connection of uid that Add counted.
func (s *Set) Remove(uid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if n := s.byUID[uid] - 1; n > 0 {
		s.byUID[uid] = n
	} else {
		delete(s.byUID, uid)
	}
}

// Open returns the connections counted, in all and of uid.
func (s *Set) Open(uid uint32) (total, ofUID int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total, s.byUID[uid]
}

// Refused returns how many connections Add refused.
func (s *Set) Refused() uint64 { return s.refused.Load() }

// Cred is a peer's identity as the kernel reports it.
type Cred struct {
	UID uint32
	PID int32
}

// PeerCred returns the SO_PEERCRED identity of a UNIX socket's peer.
func PeerCred(uc *net.UnixConn) (Cred, error) {
	raw, err := uc.SyscallConn()
	if err != nil {
		return Cred{}, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Cred{}, err
	}
	if credErr != nil {
		return Cred{}, fmt.Errorf("SO_PEERCRED: %w", credErr)
	}
	return Cred{UID: cred.Uid, PID: cred.Pid}, nil
}

// RefusalLog reports refused connections at most once per Every (default
// one second), with the number of refusals it did not report, so that a
// peer opening connections in a loop cannot flood the log.
type RefusalLog struct {
	Logf  func(format string, args ...any)
	Every time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// Refused reports one refused connection.
func (r *RefusalLog) Refused(what string, c Cred, err error) {
	if r == nil || r.Logf == nil {
		return
	}
	every := r.Every
	if every <= 0 {
		every = time.Second
	}
	r.mu.Lock()
	now := time.Now()
	if !r.last.IsZero() && now.Sub(r.last) < every {
		r.suppressed++
		r.mu.Unlock()
		return
	}
	r.last = now
	n := r.suppressed
	r.suppressed = 0
	r.mu.Unlock()
	if n > 0 {
		r.Logf("%s: refusing connection from pid %d (uid %d): %v (and %d more refused since the last report)", what, c.PID, c.UID, err, n)
	} else {
		r.Logf("%s: refusing connection from pid %d (uid %d): %v", what, c.PID, c.UID, err)
	}
}

// Listener wraps a UNIX listener: Accept refuses (closes at once)
// connections over the set's limits, and the connections it returns
// uncount themselves when closed.
type Listener struct {
	*net.UnixListener
	Set *Set
	// Log reports refusals (nil: silent).
	Log *RefusalLog
	// What names the socket in the log.
	What string
	// Lookup finds a peer's identity (tests fake uids); nil: PeerCred.
	Lookup func(*net.UnixConn) (Cred, error)

	mu   sync.Mutex // guards open
	open map[*conn]struct{}
}

// CloseConns closes every connection Accept returned that is still open
// (a server whose own shutdown waits for connections stuck in a handshake
// is unblocked by it).
func (l *Listener) CloseConns() {
	l.mu.Lock()
	cs := make([]*conn, 0, len(l.open))
	for c := range l.open {
		cs = append(cs, c)
	}
	l.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// Accept returns the next connection within the limits.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		uc, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		lookup := l.Lookup
		if lookup == nil {
			lookup = PeerCred
		}
		c, err := lookup(uc)
		if err == nil {
			err = l.Set.Add(c.UID)
		}
		if err != nil {
			l.Log.Refused(l.What, c, err)
			uc.Close()
			continue
		}
		nc := &conn{UnixConn: uc, l: l, uid: c.UID}
		l.mu.Lock()
		if l.open == nil {
			l.open = map[*conn]struct{}{}
		}
		l.open[nc] = struct{}{}
		l.mu.Unlock()
		return nc, nil
	}
}

// conn uncounts itself on its first Close.
type conn struct {
	*net.UnixConn
	l    *Listener
	uid  uint32
	once sync.Once
}

func (c *conn) Close() error {
	c.once.Do(func() {
		c.l.Set.Remove(c.uid)
		c.l.mu.Lock()
		delete(c.l.open, c)
		c.l.mu.Unlock()
	})
	return c.UnixConn.Close()
}
