package perfettoipc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/internal/peerlimit"
)

// Peer is a connection's identity, from SO_PEERCRED at accept time. It is
// the only identity the host trusts; SetPeerIdentity frames are ignored.
type Peer struct {
	UID uint32
	PID int32
}

// Service is a method table a Host exposes. Method ids are the 1-based
// positions in Methods (Perfetto's declaration order).
type Service struct {
	Name    string
	Methods []string
	// Open is called when a connection binds the service; the handler
	// serves that connection's invokes until Close.
	Open func(c *Conn) Handler
	// Transient, if set, names the methods whose handler never keeps the
	// Call past Invoke (nor replies later): their Call is reused, so the
	// hot path (CommitData) allocates nothing per frame.
	Transient func(method uint32) bool
	// InitMethod, if set, is the method a connection bound to this
	// service must invoke within the host's InitTimeout
	// (InitializeConnection for producers); otherwise binding the service
	// is enough.
	InitMethod string
}

// Handler serves one connection's calls of a bound service. Invoke and
// Close run on the connection's read goroutine, one at a time; a handler
// may keep a Call and reply later from any goroutine (streams, replies at
// session end).
type Handler interface {
	Invoke(method uint32, call *Call)
	Close()
}

// Host accepts connections on listeners and dispatches their frames to
// services.
type Host struct {
	services []*Service
	// WriteTimeout bounds one frame's send; a peer that does not read is
	// disconnected. Default 10 s.
	WriteTimeout time.Duration
	// MaxConns bounds concurrent connections; more are closed at accept.
	// Default 256.
	MaxConns int
	// MaxConnsPerUID bounds the concurrent connections of one peer uid
	// (SO_PEERCRED), so that one local user cannot take every slot of a
	// world-connectable socket. Default MaxConns/4.
	MaxConnsPerUID int
	// InitTimeout closes a connection that has not initialized this long
	// after it was accepted: it has not invoked the InitMethod of a
	// service it bound, or bound no service. Default
	// DefaultInitTimeout; negative: never.
	InitTimeout time.Duration
	// Logf reports connection errors (nil: silent). Refusals are
	// reported at most once a second.
	Logf func(format string, args ...any)

	mu      sync.Mutex
	lns     []net.Listener
	conns   map[*Conn]struct{}
	limits  *peerlimit.Set // built at the first connection
	refusal peerlimit.RefusalLog
	closed  bool
	wg      sync.WaitGroup
	// cred looks a peer up; tests fake uids with it (nil: SO_PEERCRED).
	cred func(*net.UnixConn) (Peer, error)
}

// DefaultInitTimeout is how long a connection may stay uninitialized.
const DefaultInitTimeout = 10 * time.Second

// NewHost returns a host exposing services, whose service ids are their
// 1-based positions.
func NewHost(services ...*Service) *Host {
	return &Host{services: services, conns: map[*Conn]struct{}{}}
}

func (h *Host) logf(format string, args ...any) {
	if h.Logf != nil {
		h.Logf(format, args...)
	}
}

// Listen creates a UNIX socket at path (replacing a stale socket file) and
// serves it until Close. The socket is world-connectable, as traced's
// (producers are untrusted anyway).
func (h *Host) Listen(path string) error {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("perfettoipc: listening on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return fmt.Errorf("perfettoipc: chmod %s: %w", path, err)
	}
	return h.Serve(ln)
}

// Serve accepts connections on ln in a goroutine until Close.
func (h *Host) Serve(ln *net.UnixListener) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		ln.Close()
		return errors.New("perfettoipc: host closed")
	}
	h.lns = append(h.lns, ln)
	h.wg.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.wg.Done()
		for {
			uc, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			h.ServeConn(uc)
		}
	}()
	return nil
}

// ServeConn serves one already connected socket (tests use socketpairs).
// A connection over the host's limits (in all, or of its peer's uid) is
// closed at once.
func (h *Host) ServeConn(uc *net.UnixConn) {
	lookup := h.cred
	if lookup == nil {
		lookup = peerCred
	}
	peer, err := lookup(uc)
	if err != nil {
		h.logf("perfettoipc: dropping connection: %v", err)
		uc.Close()
		return
	}
	c := &Conn{host: h, uc: uc, peer: peer, fd: -1, bound: map[uint32]Handler{}}
	h.mu.Lock()
	if h.limits == nil {
		h.limits = peerlimit.NewSet(peerlimit.Limits{Max: h.MaxConns, PerUID: h.MaxConnsPerUID})
		h.refusal.Logf = h.Logf
	}
	if h.closed {
		h.mu.Unlock()
		uc.Close()
		return
	}
	if err := h.limits.Add(peer.UID); err != nil {
		h.mu.Unlock()
		h.refusal.Refused("perfettoipc", peerlimit.Cred{UID: peer.UID, PID: peer.PID}, err)
		uc.Close()
		return
	}
	h.conns[c] = struct{}{}
	h.wg.Add(1)
	h.mu.Unlock()
	if d := h.initTimeout(); d > 0 {
		c.initTimer = time.AfterFunc(d, func() {
			if !c.initialized.Load() {
				h.logf("perfettoipc: pid %d (uid %d): not initialized within %v; disconnecting", peer.PID, peer.UID, d)
				c.Close()
			}
		})
	}
	go func() {
		defer h.wg.Done()
		c.readLoop()
		if c.initTimer != nil {
			c.initTimer.Stop()
		}
		h.mu.Lock()
		delete(h.conns, c)
		h.limits.Remove(peer.UID)
		h.mu.Unlock()
	}()
}

func (h *Host) initTimeout() time.Duration {
	switch {
	case h.InitTimeout < 0:
		return 0
	case h.InitTimeout == 0:
		return DefaultInitTimeout
	}
	return h.InitTimeout
}

// Open returns the connections served, in all and of uid.
func (h *Host) Open(uid uint32) (total, ofUID int) {
	h.mu.Lock()
	s := h.limits
	h.mu.Unlock()
	if s == nil {
		return 0, 0
	}
	return s.Open(uid)
}

// Refused returns how many connections the limits refused.
func (h *Host) Refused() uint64 {
	h.mu.Lock()
	s := h.limits
	h.mu.Unlock()
	if s == nil {
		return 0
	}
	return s.Refused()
}

// Close stops accepting, closes every connection and waits for their
// goroutines (handlers' Close included).
func (h *Host) Close() error {
	h.mu.Lock()
	h.closed = true
	lns := h.lns
	h.lns = nil
	conns := make([]*Conn, 0, len(h.conns))
	for c := range h.conns {
		conns = append(conns, c)
	}
	h.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	h.wg.Wait()
	return nil
}

func peerCred(uc *net.UnixConn) (Peer, error) {
	c, err := peerlimit.PeerCred(uc)
	return Peer{UID: c.UID, PID: c.PID}, err
}

// Conn is one client connection.
type Conn struct {
	host *Host
	uc   *net.UnixConn
	peer Peer

	// Read goroutine only.
	fd    int // the last descriptor received and not taken (-1: none)
	bound map[uint32]Handler
	spare *Call // reused for Service.Transient methods

	wmu    sync.Mutex
	wbuf   []byte
	closed atomic.Bool

	// initialized is set once the connection invoked the InitMethod of a
	// service it bound (or bound one without an InitMethod); until then
	// initTimer may close it.
	initialized atomic.Bool
	initTimer   *time.Timer
}

// markInitialized ends the connection's init timeout.
func (c *Conn) markInitialized() {
	if !c.initialized.Swap(true) && c.initTimer != nil {
		c.initTimer.Stop()
	}
}

// Peer is the identity of the connected process (SO_PEERCRED).
func (c *Conn) Peer() Peer { return c.peer }

// Close ends the connection; the read goroutine then closes the handlers.
func (c *Conn) Close() error {
	c.closed.Store(true)
	return c.uc.Close()
}

// maxFDsPerRead bounds the descriptors accepted with one read; more are
// truncated by the kernel (MSG_CTRUNC) and closed.
const maxFDsPerRead = 4

func (c *Conn) readLoop() {
	defer func() {
		for _, hd := range c.bound {
			hd.Close()
		}
		if c.fd >= 0 {
			unix.Close(c.fd)
			c.fd = -1
		}
		c.Close()
	}()
	var d Deserializer
	var view invokeView
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(maxFDsPerRead*4))
	rc, err := c.uc.SyscallConn()
	if err != nil {
		return
	}
	rr := newRawReceiver(rc, buf, oob)
	for {
		n, oobn, err := rr.read()
		if oobn > 0 {
			c.takeRights(oob[:oobn])
		}
		if n > 0 {
			if ferr := d.Feed(buf[:n]); ferr != nil {
				c.host.logf("perfettoipc: pid %d: %v; disconnecting", c.peer.PID, ferr)
				return
			}
			for {
				p, ferr := d.nextPayload()
				if ferr != nil {
					c.host.logf("perfettoipc: pid %d: %v; disconnecting", c.peer.PID, ferr)
					return
				}
				if p == nil {
					break
				}
				if parseInvoke(p, &view) {
					c.invoke(view.requestID, view.serviceID, view.method, view.args, view.dropReply)
				} else if f := new(Frame); proto.Unmarshal(p, f) == nil {
					c.dispatch(f)
				} else {
					d.Dropped++
				}
				if c.closed.Load() {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// takeRights keeps the first descriptor of a control message (replacing,
// and closing, one no handler took) and closes any others.
func (c *Conn) takeRights(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if c.fd >= 0 {
				unix.Close(c.fd)
			}
			c.fd = fd
		}
	}
}

func (c *Conn) dispatch(f *Frame) {
	rid := f.GetRequestId()
	switch m := f.Msg.(type) {
	case *Frame_MsgBindService:
		c.bind(rid, m.MsgBindService.GetServiceName())
	case *Frame_MsgInvokeMethod:
		inv := m.MsgInvokeMethod
		c.invoke(rid, inv.GetServiceId(), inv.GetMethodId(), inv.GetArgsProto(), inv.GetDropReply())
	case *Frame_SetPeerIdentity_:
		// Identity comes from SO_PEERCRED only on UNIX sockets.
	default:
		_ = c.send(&Frame{RequestId: proto.Uint64(rid), Msg: &Frame_MsgRequestError{
			MsgRequestError: &Frame_RequestError{Error: proto.String("unknown request")}}}, -1)
	}
}

func (c *Conn) bind(rid uint64, name string) {
	reply := &Frame_BindServiceReply{}
	for i, s := range c.host.services {
		if s.Name != name {
			continue
		}
		id := uint32(i + 1)
		if _, ok := c.bound[id]; !ok {
			c.bound[id] = s.Open(c)
		}
		if s.InitMethod == "" {
			c.markInitialized()
		}
		reply.Success = proto.Bool(true)
		reply.ServiceId = proto.Uint32(id)
		for j, mn := range s.Methods {
			reply.Methods = append(reply.Methods, &Frame_MethodInfo{Id: proto.Uint32(uint32(j + 1)), Name: proto.String(mn)})
		}
		break
	}
	_ = c.send(&Frame{RequestId: proto.Uint64(rid), Msg: &Frame_MsgBindServiceReply{MsgBindServiceReply: reply}}, -1)
}

func (c *Conn) invoke(rid uint64, sid, mid uint32, args []byte, drop bool) {
	var call *Call
	hd, ok := c.bound[sid]
	var svc *Service
	if ok {
		svc = c.host.services[sid-1]
	}
	if svc != nil && svc.Transient != nil && mid != 0 && int(mid) <= len(svc.Methods) && svc.Transient(mid) {
		// The handler does not keep this call: one per connection serves them all.
		if c.spare == nil {
			c.spare = &Call{}
		}
		call = c.spare
		call.reset(c, rid, args, drop)
	} else {
		call = &Call{}
		call.reset(c, rid, args, drop)
	}
	if !ok || mid == 0 || int(mid) > len(svc.Methods) {
		call.Fail()
		return
	}
	if !c.initialized.Load() && svc.Methods[mid-1] == svc.InitMethod {
		c.markInitialized()
	}
	hd.Invoke(mid, call)
}

// send writes one frame, with fd (if >= 0) as SCM_RIGHTS on it. Safe from
// any goroutine; bounded by the host's WriteTimeout.
func (c *Conn) send(f *Frame, fd int) error {
	return c.write(func(b []byte) ([]byte, error) { return AppendFrame(b, f) }, fd)
}

// sendReply writes an InvokeMethodReply frame, encoded in place.
func (c *Conn) sendReply(rid uint64, success, hasMore bool, reply []byte, fd int) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed.Load() {
		return net.ErrClosed
	}
	var err error
	c.wbuf, err = appendReplyFrame(c.wbuf[:0], rid, success, hasMore, reply)
	if err != nil {
		return err
	}
	return c.flushLocked(fd)
}

func (c *Conn) write(encode func([]byte) ([]byte, error), fd int) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed.Load() {
		return net.ErrClosed
	}
	var err error
	c.wbuf, err = encode(c.wbuf[:0])
	if err != nil {
		return err
	}
	return c.flushLocked(fd)
}

// flushLocked writes c.wbuf (c.wmu held).
func (c *Conn) flushLocked(fd int) error {
	timeout := c.host.WriteTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	_ = c.uc.SetWriteDeadline(time.Now().Add(timeout))
	b := c.wbuf
	if fd >= 0 {
		n, _, werr := c.uc.WriteMsgUnix(b, unix.UnixRights(fd), nil)
		if werr != nil {
			c.fail(werr)
			return werr
		}
		b = b[n:]
	}
	if len(b) > 0 {
		if _, werr := c.uc.Write(b); werr != nil {
			c.fail(werr)
			return werr
		}
	}
	return nil
}

func (c *Conn) fail(err error) {
	c.host.logf("perfettoipc: pid %d: send: %v; disconnecting", c.peer.PID, err)
	c.Close()
}

// Call is one InvokeMethod being answered.
type Call struct {
	conn      *Conn
	requestID uint64
	// Args is the serialized request message (untrusted). It is valid
	// only during Invoke (it may alias the connection's read buffer).
	Args      []byte
	dropReply bool
	mu        sync.Mutex
	finished  bool
}

func (c *Call) reset(conn *Conn, rid uint64, args []byte, drop bool) {
	c.conn, c.requestID, c.Args, c.dropReply, c.finished = conn, rid, args, drop, false
}

// Conn is the connection the call came on.
func (c *Call) Conn() *Conn { return c.conn }

// DropReply says the client asked for no reply.
func (c *Call) DropReply() bool { return c.dropReply }

// TakeFD hands over the descriptor received with (or before) this call's
// frame, or -1. Only during Invoke; the caller owns it.
func (c *Call) TakeFD() int {
	fd := c.conn.fd
	c.conn.fd = -1
	return fd
}

// Reply sends a successful reply; hasMore keeps a stream open. Replies
// after the final one, and all replies of a drop_reply call, are not sent.
func (c *Call) Reply(m proto.Message, hasMore bool) error { return c.ReplyFD(m, hasMore, -1) }

// ReplyFD is Reply with a descriptor passed along (SCM_RIGHTS).
func (c *Call) ReplyFD(m proto.Message, hasMore bool, fd int) error {
	if c.skip() {
		return nil
	}
	var b []byte
	if proto.Size(m) > 0 { // an empty message (most replies) encodes to nothing
		var err error
		if b, err = proto.Marshal(m); err != nil {
			return err
		}
	}
	return c.reply(true, hasMore, b, fd)
}

// ReplyRaw sends a successful reply whose reply_proto is already encoded
// (valid until ReplyRaw returns).
func (c *Call) ReplyRaw(reply []byte, hasMore bool) error { return c.reply(true, hasMore, reply, -1) }

// Fail sends a failed reply: as traced, has_more false and no success
// field.
func (c *Call) Fail() { _ = c.reply(false, false, nil, -1) }

// skip says whether a reply would not be sent (drop_reply, or after the
// final one), before encoding it.
func (c *Call) skip() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.finished || c.dropReply
}

func (c *Call) reply(success, hasMore bool, b []byte, fd int) error {
	c.mu.Lock()
	if c.finished || c.dropReply {
		c.mu.Unlock()
		return nil
	}
	c.finished = !hasMore
	c.mu.Unlock()
	return c.conn.sendReply(c.requestID, success, hasMore, b, fd)
}
