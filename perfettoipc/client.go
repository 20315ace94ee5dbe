package perfettoipc

import (
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/protobuf/proto"
)

// Client is the consumer side of the protocol, for tracepipe's own
// commands (`tracepipe perfetto-sources`): it binds one service and
// invokes its methods one at a time. Everything the server sends is
// untrusted (it may be any process listening on the path): frames are
// bounded by the Deserializer, every read by a deadline.
type Client struct {
	uc      *net.UnixConn
	d       Deserializer
	buf     []byte
	rid     uint64
	service uint32
	methods map[string]uint32
	// Timeout bounds each read and write (default 5 s).
	Timeout time.Duration
}

// DialService connects to a UNIX socket and binds service (e.g.
// "ConsumerPort"), bounded by timeout.
func DialService(path, service string, timeout time.Duration) (*Client, error) {
	conn, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		return nil, fmt.Errorf("perfettoipc: connecting to %s: %w", path, err)
	}
	c, err := newClient(conn.(*net.UnixConn), service, timeout)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return c, nil
}

// newClient binds service on a connected socket.
func newClient(uc *net.UnixConn, service string, timeout time.Duration) (*Client, error) {
	c := &Client{uc: uc, buf: make([]byte, 64<<10), methods: map[string]uint32{}, Timeout: timeout}
	rid, err := c.send(&Frame{Msg: &Frame_MsgBindService{MsgBindService: &Frame_BindService{ServiceName: proto.String(service)}}})
	if err != nil {
		c.Close()
		return nil, err
	}
	f, err := c.recv(rid)
	if err != nil {
		c.Close()
		return nil, err
	}
	r := f.GetMsgBindServiceReply()
	if !r.GetSuccess() {
		c.Close()
		return nil, fmt.Errorf("perfettoipc: the server does not serve %s", service)
	}
	c.service = r.GetServiceId()
	for _, m := range r.GetMethods() {
		c.methods[m.GetName()] = m.GetId()
	}
	return c, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.uc.Close() }

func (c *Client) timeout() time.Duration {
	if c.Timeout <= 0 {
		return 5 * time.Second
	}
	return c.Timeout
}

func (c *Client) send(f *Frame) (uint64, error) {
	c.rid++
	f.RequestId = proto.Uint64(c.rid)
	b, err := AppendFrame(nil, f)
	if err != nil {
		return 0, err
	}
	_ = c.uc.SetWriteDeadline(time.Now().Add(c.timeout()))
	if _, err := c.uc.Write(b); err != nil {
		return 0, fmt.Errorf("perfettoipc: sending: %w", err)
	}
	return c.rid, nil
}

// recv returns the next frame answering rid; frames for other requests
// are skipped.
func (c *Client) recv(rid uint64) (*Frame, error) {
	for {
		f, err := c.d.Next()
		if err != nil {
			return nil, err
		}
		if f != nil {
			if f.GetRequestId() != rid {
				continue
			}
			if e := f.GetMsgRequestError(); e != nil {
				return nil, fmt.Errorf("perfettoipc: request error: %q", e.GetError())
			}
			return f, nil
		}
		_ = c.uc.SetReadDeadline(time.Now().Add(c.timeout()))
		n, err := c.uc.Read(c.buf)
		if n > 0 {
			if ferr := c.d.Feed(c.buf[:n]); ferr != nil {
				return nil, ferr
			}
		}
		if err != nil {
			return nil, fmt.Errorf("perfettoipc: waiting for reply %d: %w", rid, err)
		}
	}
}

// ErrNoMethod is returned for a method the bound service does not list.
var ErrNoMethod = errors.New("perfettoipc: the service has no such method")

// Bounds on what one streamed call may collect.
const (
	maxStreamReplies = 4096
	maxStreamBytes   = 32 << 20
)

// Invoke calls method with args and decodes each reply of the stream
// into a fresh message from newReply, calling each with it, until the
// last one (has_more false). A failed reply is an error.
func (c *Client) Invoke(method string, args proto.Message, newReply func() proto.Message, each func(proto.Message)) error {
	id, ok := c.methods[method]
	if !ok {
		return fmt.Errorf("%w: %s", ErrNoMethod, method)
	}
	b, err := proto.Marshal(args)
	if err != nil {
		return err
	}
	rid, err := c.send(&Frame{Msg: &Frame_MsgInvokeMethod{MsgInvokeMethod: &Frame_InvokeMethod{
		ServiceId: proto.Uint32(c.service), MethodId: proto.Uint32(id), ArgsProto: b, DropReply: proto.Bool(false)}}})
	if err != nil {
		return err
	}
	total := 0
	for range maxStreamReplies {
		f, err := c.recv(rid)
		if err != nil {
			return err
		}
		r := f.GetMsgInvokeMethodReply()
		if r == nil {
			return fmt.Errorf("perfettoipc: %s: unexpected frame %T", method, f.Msg)
		}
		if !r.GetSuccess() {
			return fmt.Errorf("perfettoipc: %s failed", method)
		}
		if total += len(r.GetReplyProto()); total > maxStreamBytes {
			return fmt.Errorf("perfettoipc: %s: replies above %d bytes", method, maxStreamBytes)
		}
		m := newReply()
		if err := proto.Unmarshal(r.GetReplyProto(), m); err != nil {
			return fmt.Errorf("perfettoipc: %s reply: %w", method, err)
		}
		each(m)
		if !r.GetHasMore() {
			return nil
		}
	}
	return fmt.Errorf("perfettoipc: %s: more than %d replies", method, maxStreamReplies)
}

// QueryServiceState asks a consumer port for the service state, merging
// a streamed reply's parts (as Perfetto's client does).
func (c *Client) QueryServiceState() (*TracingServiceState, error) {
	st := &TracingServiceState{}
	err := c.Invoke("QueryServiceState", &QueryServiceStateRequest{},
		func() proto.Message { return &QueryServiceStateResponse{} },
		func(m proto.Message) { proto.Merge(st, m.(*QueryServiceStateResponse).GetServiceState()) })
	if err != nil {
		return nil, err
	}
	return st, nil
}
