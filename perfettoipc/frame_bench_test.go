package perfettoipc

import (
	"io"
	"net"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/smb"
)

// commitFrames returns n CommitData invokes (drop_reply, as producers
// send them while tracing: capture h) in one stream, each moving one
// chunk and patching it, as traced_probes' do.
func commitFrames(tb testing.TB, n int) []byte {
	tb.Helper()
	var stream []byte
	for i := range n {
		cd := smb.CommitData{
			ChunksToMove:  []smb.ChunkToMove{{Page: uint32(i % 64), Chunk: 0, TargetBuffer: 1}},
			ChunksToPatch: []smb.ChunkToPatch{{TargetBuffer: 1, WriterID: 1, ChunkID: uint32(i), Patches: []smb.Patch{{Offset: 16, Data: [4]byte{1, 2, 3, 4}}}}},
		}
		f := &Frame{RequestId: proto.Uint64(uint64(i + 10)), Msg: &Frame_MsgInvokeMethod{MsgInvokeMethod: &Frame_InvokeMethod{
			ServiceId: proto.Uint32(1), MethodId: proto.Uint32(uint32(mCommitData)), ArgsProto: cd.AppendMarshal(nil), DropReply: proto.Bool(true)}}}
		var err error
		if stream, err = AppendFrame(stream, f); err != nil {
			tb.Fatal(err)
		}
	}
	return stream
}

// countingBackend counts commits.
type countingBackend struct {
	nopBackend
	commits int
}

func (b *countingBackend) Commit(*Producer, []byte, *smb.CommitData) { b.commits++ }

// producerConn is an initialized producer on a connection without a
// socket: the read loop's decode and dispatch, minus the syscall.
func producerConn(b Backend) *Conn {
	svc := NewProducerPort(b)
	h := NewHost(svc)
	c := &Conn{host: h, fd: -1, bound: map[uint32]Handler{}}
	p := svc.Open(c).(*Producer)
	p.initialized = true
	c.bound[1] = p
	return c
}

// decodeAll feeds stream in 64 KiB reads, as the read loop does, and
// dispatches every frame.
func decodeAll(c *Conn, d *Deserializer, view *invokeView, stream []byte) {
	for len(stream) > 0 {
		n := min(len(stream), 64<<10)
		if err := d.Feed(stream[:n]); err != nil {
			panic(err)
		}
		stream = stream[n:]
		for {
			p, err := d.nextPayload()
			if err != nil || p == nil {
				break
			}
			if !parseInvoke(p, view) {
				panic("not an invoke")
			}
			c.invoke(view.requestID, view.serviceID, view.method, view.args, view.dropReply)
		}
	}
}

// BenchmarkCommitDataDecode is the producer socket's hot path: frames
// split from the byte stream, read in place, dispatched to the producer
// port, CommitData validated and handed to the backend. Target: no
// allocation per frame.
func BenchmarkCommitDataDecode(b *testing.B) {
	const frames = 256
	stream := commitFrames(b, frames)
	be := &countingBackend{}
	c := producerConn(be)
	var d Deserializer
	var view invokeView
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		decodeAll(c, &d, &view, stream)
	}
	b.StopTimer()
	if be.commits%frames != 0 || be.commits == 0 {
		b.Fatalf("%d commits", be.commits)
	}
}

// packetSession serves the same packets over and over (ReadBuffers of a
// long trace).
type packetSession struct {
	fakeSession
	pkts  [][]byte
	left  int
	total int
}

func (s *packetSession) ReadPackets(maxBytes int) [][]byte {
	if s.left == 0 {
		return nil
	}
	n, size := 0, 0
	for n < len(s.pkts) && n < s.left && (n == 0 || size+len(s.pkts[n]) <= maxBytes) {
		size += len(s.pkts[n])
		n++
	}
	s.left -= n
	return s.pkts[:n]
}

// socketConn is a host connection whose peer discards what it reads.
func socketConn(tb testing.TB) *Conn {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	peer := fileConn(tb, fds[1])
	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, peer); close(done) }()
	uc := fileConn(tb, fds[0])
	tb.Cleanup(func() { uc.Close(); <-done; peer.Close() })
	return &Conn{host: NewHost(), uc: uc, fd: -1}
}

var _ net.Conn = (*net.UnixConn)(nil)

// BenchmarkReadBuffersEncode is the consumer socket's hot path: a trace's
// packets cut into slices, encoded into ~32 KiB replies and written.
// Target: no allocation per reply or slice.
func BenchmarkReadBuffersEncode(b *testing.B) {
	pkts := make([][]byte, 64)
	for i := range pkts {
		pkts[i] = make([]byte, 700+i*20) // 0.7 to 2 KiB, a few cut across replies
	}
	sess := &packetSession{pkts: pkts}
	for _, p := range pkts {
		sess.total += len(p)
	}
	c := socketConn(b)
	var buf []byte
	call := &Call{}
	b.SetBytes(int64(sess.total))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		sess.left = len(pkts)
		call.reset(c, 3, nil, false)
		buf = readBuffers(call, sess, buf)
	}
}

// The hot paths allocate nothing once their buffers have grown.
func TestHotPathsAllocationFree(t *testing.T) {
	stream := commitFrames(t, 64)
	c := producerConn(&countingBackend{})
	var d Deserializer
	var view invokeView
	decodeAll(c, &d, &view, stream) // grow the buffers
	if n := testing.AllocsPerRun(20, func() { decodeAll(c, &d, &view, stream) }); n != 0 {
		t.Errorf("CommitData decode: %.1f allocations per 64 frames", n)
	}
	pkts := [][]byte{make([]byte, 40<<10), make([]byte, 100), make([]byte, 9000)}
	sess := &packetSession{pkts: pkts}
	sc := socketConn(t)
	var buf []byte
	call := &Call{}
	run := func() {
		sess.left = len(pkts)
		call.reset(sc, 3, nil, false)
		buf = readBuffers(call, sess, buf)
	}
	run()
	if n := testing.AllocsPerRun(20, run); n != 0 {
		t.Errorf("ReadBuffers encode: %.1f allocations per call", n)
	}
}
