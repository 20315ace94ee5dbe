package perfettoipc

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// echoService answers method 1 with its args, method 2 with a 3-reply
// stream, method 3 with the size of the descriptor it received, and
// fails method 4.
type echoHandler struct{}

func (echoHandler) Close() {}
func (echoHandler) Invoke(m uint32, c *Call) {
	switch m {
	case 1:
		var r Frame_BindService
		if err := proto.Unmarshal(c.Args, &r); err != nil {
			c.Fail()
			return
		}
		_ = c.Reply(&r, false)
	case 2:
		for i := range 3 {
			_ = c.Reply(&Frame_MethodInfo{Id: proto.Uint32(uint32(i))}, i < 2)
		}
		_ = c.Reply(&Frame_MethodInfo{}, false) // after the final reply: not sent
	case 3:
		fd := c.TakeFD()
		if fd < 0 {
			c.Fail()
			return
		}
		var st unix.Stat_t
		_ = unix.Fstat(fd, &st)
		unix.Close(fd)
		_ = c.Reply(&Frame_MethodInfo{Id: proto.Uint32(uint32(st.Size))}, false)
	default:
		c.Fail()
	}
}

func echoHost() *Host {
	return NewHost(&Service{Name: "Echo", Methods: []string{"Echo", "Stream", "Size", "Fail"},
		Open: func(*Conn) Handler { return echoHandler{} }})
}

func TestHostBindInvokeStreamFD(t *testing.T) {
	h := echoHost()
	defer h.Close()
	c := pair(t, h)

	if r := c.bind("Nope"); r.GetSuccess() || len(r.Methods) != 0 {
		t.Fatalf("unknown service bound: %v", r)
	}
	r := c.bind("Echo")
	if !r.GetSuccess() || r.GetServiceId() != 1 || len(r.Methods) != 4 || r.Methods[2].GetName() != "Size" || r.Methods[2].GetId() != 3 {
		t.Fatalf("bind reply %v", r)
	}

	rid := c.invoke(1, 1, &Frame_BindService{ServiceName: proto.String("hi")}, false, -1)
	f := c.recv()
	var got Frame_BindService
	if rep := f.GetMsgInvokeMethodReply(); f.GetRequestId() != rid || !rep.GetSuccess() || proto.Unmarshal(rep.GetReplyProto(), &got) != nil || got.GetServiceName() != "hi" {
		t.Fatalf("echo reply %v", f)
	}

	rid = c.invoke(1, 2, &Frame_BindService{}, false, -1)
	for i := range 3 {
		f := c.recv()
		rep := f.GetMsgInvokeMethodReply()
		if f.GetRequestId() != rid || !rep.GetSuccess() || rep.GetHasMore() != (i < 2) {
			t.Fatalf("stream reply %d: %v", i, f)
		}
	}

	mf, err := unix.MemfdCreate("t", 0)
	if err != nil {
		t.Fatal(err)
	}
	_ = unix.Ftruncate(mf, 12345)
	rid = c.invoke(1, 3, &Frame_BindService{}, false, mf)
	unix.Close(mf)
	f = c.recv()
	var mi Frame_MethodInfo
	if rep := f.GetMsgInvokeMethodReply(); f.GetRequestId() != rid || proto.Unmarshal(rep.GetReplyProto(), &mi) != nil || mi.GetId() != 12345 {
		t.Fatalf("fd reply %v (the stream reply after the final one must not be sent)", f)
	}

	// Unknown method ids, unknown service ids and undecodable args fail,
	// a drop_reply failure sends nothing, non-request frames get an error.
	for _, inv := range []struct{ s, m uint32 }{{1, 0}, {1, 5}, {2, 1}, {1, 4}} {
		rid := c.invoke(inv.s, inv.m, &Frame_BindService{}, false, -1)
		f := c.recv()
		if rep := f.GetMsgInvokeMethodReply(); f.GetRequestId() != rid || rep == nil || rep.Success != nil || rep.GetHasMore() {
			t.Fatalf("service %d method %d: %v", inv.s, inv.m, f)
		}
	}
	c.invokeRaw(1, 1, []byte{0xff}, true, -1)
	rid = c.invokeRaw(1, 1, []byte{0xff}, false, -1)
	if f := c.recv(); f.GetRequestId() != rid || f.GetMsgInvokeMethodReply().Success != nil {
		t.Fatalf("undecodable args: %v", f)
	}
	c.send(&Frame{RequestId: proto.Uint64(99), Msg: &Frame_MsgInvokeMethodReply{MsgInvokeMethodReply: &Frame_InvokeMethodReply{}}}, -1)
	if f := c.recv(); f.GetMsgRequestError().GetError() != "unknown request" {
		t.Fatalf("reply sent to the host: %v", f)
	}
}

func TestHostDisconnectsOversizedFrame(t *testing.T) {
	h := echoHost()
	defer h.Close()
	c := pair(t, h)
	c.sendRaw([]byte{0xfd, 0xff, 0x01, 0x00}, -1)
	if f, err := c.tryRecv(10e9); err == nil {
		t.Fatalf("connection still open after an oversized header: %v", f)
	}
}

func TestHostPeerIdentityFromSocket(t *testing.T) {
	var peer Peer
	got := make(chan Peer, 1)
	h := NewHost(&Service{Name: "P", Methods: []string{"M"}, Open: func(c *Conn) Handler {
		got <- c.Peer()
		return echoHandler{}
	}})
	defer h.Close()
	c := pair(t, h)
	// A SetPeerIdentity frame claiming another process changes nothing.
	c.send(&Frame{Msg: &Frame_SetPeerIdentity_{SetPeerIdentity: &Frame_SetPeerIdentity{Pid: proto.Int32(1), Uid: proto.Int32(4242)}}}, -1)
	c.bind("P")
	peer = <-got
	if peer.PID != int32(os.Getpid()) || peer.UID != uint32(os.Getuid()) {
		t.Fatalf("peer %+v, want this process (%d, %d)", peer, os.Getpid(), os.Getuid())
	}
}
