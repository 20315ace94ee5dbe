package perfettoipc

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// FuzzClientReplies plays any byte stream as the server's answer to the
// Client's BindService and QueryServiceState (seeded with traced's
// replies from the captures): no panic, no hang (the stream ends), and a
// state is only returned from a successful, decodable reply.
func FuzzClientReplies(f *testing.F) {
	bind, _ := AppendFrame(nil, &Frame{RequestId: proto.Uint64(1), Msg: &Frame_MsgBindServiceReply{MsgBindServiceReply: &Frame_BindServiceReply{
		Success: proto.Bool(true), ServiceId: proto.Uint32(1),
		Methods: []*Frame_MethodInfo{{Id: proto.Uint32(12), Name: proto.String("QueryServiceState")}}}}})
	st, _ := proto.Marshal(&QueryServiceStateResponse{ServiceState: &TracingServiceState{NumSessions: proto.Int32(1),
		DataSources: []*TracingServiceState_DataSource{{ProducerId: proto.Int32(1), DsDescriptor: &DataSourceDescriptor{Name: proto.String("linux.sys_stats")}}}}})
	part := func(hasMore bool) []byte {
		b, _ := AppendFrame(nil, &Frame{RequestId: proto.Uint64(2), Msg: &Frame_MsgInvokeMethodReply{MsgInvokeMethodReply: &Frame_InvokeMethodReply{
			Success: proto.Bool(true), HasMore: proto.Bool(hasMore), ReplyProto: st}}})
		return b
	}
	f.Add(append(append(append([]byte{}, bind...), part(true)...), part(false)...))
	f.Add(append(append([]byte{}, bind...), 0x06, 0, 0, 0, 0x10, 0x02, 0x32, 0x02, 0x10, 0x00)) // traced's failed reply
	addGoldenSeeds(f, func(payload []byte) {
		var fr Frame
		if proto.Unmarshal(payload, &fr) == nil && fr.GetMsgInvokeMethodReply() != nil && len(payload) < 4096 {
			b, _ := AppendFrame(nil, &fr)
			f.Add(append(append([]byte{}, bind...), b...))
		}
	})
	f.Fuzz(func(t *testing.T, stream []byte) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		server := fileConn(t, fds[1])
		defer server.Close()
		go func() {
			_, _ = server.Write(stream)
			_ = server.CloseWrite() // the stream ends: the client sees EOF
		}()
		c, err := newClient(fileConn(t, fds[0]), "ConsumerPort", time.Second)
		if err != nil {
			return
		}
		defer c.Close()
		if s, err := c.QueryServiceState(); err == nil && s == nil {
			t.Fatal("no error and no state")
		}
	})
}
