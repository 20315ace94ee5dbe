// Package perfettotest is the perfetto command's side of a Perfetto
// consumer socket, for tests and benchmarks of the programs that serve
// one (`tracepipe serve --perfetto`, tracepiped): bind the ConsumerPort,
// invoke its methods by name (with a descriptor for write_into_file),
// and wait for replies. It trusts the service less than the service
// trusts it: every read has a deadline. It must not be imported by
// anything but tests.
package perfettotest

import (
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	ipc "github.com/tracepipe/tracepipe/perfettoipc"
)

// Consumer is a connection bound to the ConsumerPort.
type Consumer struct {
	conn    *net.UnixConn
	d       ipc.Deserializer
	buf     []byte
	rid     uint64
	methods map[string]uint32
	// pending keeps the replies that arrived while another was awaited.
	pending map[uint64][]*ipc.Frame_InvokeMethodReply
	// Bind is the service's reply to BindService.
	Bind *ipc.Frame
}

// Dial connects to the consumer socket at path and binds the
// ConsumerPort, waiting at most timeout for the reply.
func Dial(path string, timeout time.Duration) (*Consumer, error) {
	c, err := net.Dial("unix", path)
	if err != nil {
		return nil, err
	}
	cc := NewConsumer(c.(*net.UnixConn))
	f, err := cc.BindConsumerPort(timeout)
	if err != nil {
		c.Close()
		return nil, err
	}
	if !f.GetMsgBindServiceReply().GetSuccess() {
		c.Close()
		return nil, fmt.Errorf("bind ConsumerPort refused: %v", f)
	}
	return cc, nil
}

// NewConsumer wraps a connection that is not bound yet (BindConsumerPort).
func NewConsumer(conn *net.UnixConn) *Consumer {
	return &Consumer{conn: conn, buf: make([]byte, 64<<10), methods: map[string]uint32{}, pending: map[uint64][]*ipc.Frame_InvokeMethodReply{}}
}

// BindConsumerPort asks to bind the ConsumerPort and returns the first
// frame the service answers with, whatever it is, within timeout.
func (c *Consumer) BindConsumerPort(timeout time.Duration) (*ipc.Frame, error) {
	c.rid++
	fr, err := ipc.AppendFrame(nil, &ipc.Frame{RequestId: proto.Uint64(c.rid), Msg: &ipc.Frame_MsgBindService{MsgBindService: &ipc.Frame_BindService{ServiceName: proto.String("ConsumerPort")}}})
	if err != nil {
		return nil, err
	}
	if _, err := c.conn.Write(fr); err != nil {
		return nil, err
	}
	f, err := c.next(time.Now().Add(timeout))
	if err != nil {
		return nil, err
	}
	for _, m := range f.GetMsgBindServiceReply().GetMethods() {
		c.methods[m.GetName()] = m.GetId()
	}
	c.Bind = f
	return f, nil
}

// Invoke calls method with args, passing descriptor fd when it is not
// negative, and returns the request id to wait on.
func (c *Consumer) Invoke(method string, args proto.Message, fd int) (uint64, error) {
	id, ok := c.methods[method]
	if !ok {
		return 0, fmt.Errorf("the service has no method %q", method)
	}
	b, err := proto.Marshal(args)
	if err != nil {
		return 0, err
	}
	c.rid++
	fr, err := ipc.AppendFrame(nil, &ipc.Frame{RequestId: proto.Uint64(c.rid), Msg: &ipc.Frame_MsgInvokeMethod{MsgInvokeMethod: &ipc.Frame_InvokeMethod{
		ServiceId: proto.Uint32(1), MethodId: proto.Uint32(id), ArgsProto: b, DropReply: proto.Bool(false)}}})
	if err != nil {
		return 0, err
	}
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	if _, _, err := c.conn.WriteMsgUnix(fr, oob, nil); err != nil {
		return 0, err
	}
	return c.rid, nil
}

// Reply waits until deadline for the next reply to request rid.
func (c *Consumer) Reply(rid uint64, deadline time.Time) (*ipc.Frame_InvokeMethodReply, error) {
	if q := c.pending[rid]; len(q) > 0 {
		c.pending[rid] = q[1:]
		return q[0], nil
	}
	for {
		f, err := c.next(deadline)
		if err != nil {
			return nil, fmt.Errorf("waiting for the reply to request %d: %w", rid, err)
		}
		if f.GetRequestId() == rid {
			return f.GetMsgInvokeMethodReply(), nil
		}
		c.pending[f.GetRequestId()] = append(c.pending[f.GetRequestId()], f.GetMsgInvokeMethodReply())
	}
}

// next returns the next frame, reading until deadline.
func (c *Consumer) next(deadline time.Time) (*ipc.Frame, error) {
	_ = c.conn.SetReadDeadline(deadline)
	for {
		if f, err := c.d.Next(); err != nil || f != nil {
			return f, err
		}
		n, err := c.conn.Read(c.buf)
		if err != nil {
			return nil, err
		}
		if err := c.d.Feed(c.buf[:n]); err != nil {
			return nil, err
		}
	}
}

// Close closes the connection.
func (c *Consumer) Close() error { return c.conn.Close() }
