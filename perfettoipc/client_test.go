package perfettoipc

import (
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// testClient is the client side of Perfetto's IPC, written from the
// reference only (it shares nothing with the host but the generated
// messages): it sends frames with optional descriptors and reads frames
// with the descriptors that came with them.
type testClient struct {
	t     testing.TB
	uc    *net.UnixConn
	d     Deserializer
	fds   []int
	rid   uint64
	queue []*Frame
}

func fileConn(t testing.TB, fd int) *net.UnixConn {
	t.Helper()
	f := os.NewFile(uintptr(fd), "sock")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	return c.(*net.UnixConn)
}

// pair returns a host-served connection and its client.
func pair(t testing.TB, h *Host) *testClient {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	h.ServeConn(fileConn(t, fds[1]))
	c := &testClient{t: t, uc: fileConn(t, fds[0])}
	t.Cleanup(func() { c.close() })
	return c
}

func (c *testClient) close() {
	c.uc.Close()
	for _, fd := range c.fds {
		unix.Close(fd)
	}
	c.fds = nil
}

// sendRaw writes bytes with fd (if >= 0) attached.
func (c *testClient) sendRaw(b []byte, fd int) {
	c.t.Helper()
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	if _, _, err := c.uc.WriteMsgUnix(b, oob, nil); err != nil {
		c.t.Fatalf("client send: %v", err)
	}
}

func (c *testClient) send(f *Frame, fd int) {
	c.t.Helper()
	b, err := AppendFrame(nil, f)
	if err != nil {
		c.t.Fatal(err)
	}
	c.sendRaw(b, fd)
}

// bind binds name and returns the reply.
func (c *testClient) bind(name string) *Frame_BindServiceReply {
	c.t.Helper()
	c.rid++
	c.send(&Frame{RequestId: proto.Uint64(c.rid), Msg: &Frame_MsgBindService{MsgBindService: &Frame_BindService{ServiceName: proto.String(name)}}}, -1)
	f := c.recv()
	if f.GetRequestId() != c.rid || f.GetMsgBindServiceReply() == nil {
		c.t.Fatalf("bind %s: got %v", name, f)
	}
	return f.GetMsgBindServiceReply()
}

// invoke sends an InvokeMethod and returns its request id.
func (c *testClient) invoke(service, method uint32, args proto.Message, drop bool, fd int) uint64 {
	c.t.Helper()
	b, err := proto.Marshal(args)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.invokeRaw(service, method, b, drop, fd)
}

func (c *testClient) invokeRaw(service, method uint32, args []byte, drop bool, fd int) uint64 {
	c.t.Helper()
	c.rid++
	if args == nil {
		args = []byte{}
	}
	c.send(&Frame{RequestId: proto.Uint64(c.rid), Msg: &Frame_MsgInvokeMethod{MsgInvokeMethod: &Frame_InvokeMethod{
		ServiceId: proto.Uint32(service), MethodId: proto.Uint32(method), ArgsProto: args, DropReply: proto.Bool(drop)}}}, fd)
	return c.rid
}

// recv returns the next frame, failing the test after 10 s.
func (c *testClient) recv() *Frame {
	c.t.Helper()
	f, err := c.tryRecv(10 * time.Second)
	if err != nil {
		c.t.Fatalf("client recv: %v", err)
	}
	return f
}

func (c *testClient) tryRecv(timeout time.Duration) (*Frame, error) {
	if len(c.queue) > 0 {
		f := c.queue[0]
		c.queue = c.queue[1:]
		return f, nil
	}
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(16))
	deadline := time.Now().Add(timeout)
	for {
		f, err := c.d.Next()
		if err != nil || f != nil {
			return f, err
		}
		_ = c.uc.SetReadDeadline(deadline)
		n, oobn, _, _, err := c.uc.ReadMsgUnix(buf, oob)
		if oobn > 0 {
			msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
			for _, m := range msgs {
				fds, _ := unix.ParseUnixRights(&m)
				c.fds = append(c.fds, fds...)
			}
		}
		if n > 0 {
			if err := c.d.Feed(buf[:n]); err != nil {
				return nil, err
			}
		}
		if err != nil {
			return nil, err
		}
	}
}

// takeFD returns the oldest descriptor received and not yet taken, or -1.
func (c *testClient) takeFD() int {
	if len(c.fds) == 0 {
		return -1
	}
	fd := c.fds[0]
	c.fds = c.fds[1:]
	return fd
}
