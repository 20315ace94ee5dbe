package perfettoipc

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
)

type stateBackend struct{ st *TracingServiceState }

func (b stateBackend) EnableTracing(Peer, []byte, int) (ConsumerSession, error) {
	return nil, fmt.Errorf("no sessions here")
}
func (b stateBackend) QueryServiceState(Peer, bool) *TracingServiceState { return b.st }
func (b stateBackend) CloneSession(Peer, *CloneSessionRequest) (ConsumerSession, *CloneSessionResponse) {
	return nil, &CloneSessionResponse{Success: proto.Bool(false), Error: proto.String("no sessions here")}
}

// A service state larger than a frame is streamed in parts that merge
// back into it; every frame stays within the bound.
func TestQueryServiceStateStreamsLargeState(t *testing.T) {
	st := &TracingServiceState{NumSessions: proto.Int32(0), Producers: []*TracingServiceState_Producer{{Id: proto.Int32(1), Name: proto.String("p")}}}
	for i := range 3000 {
		st.DataSources = append(st.DataSources, &TracingServiceState_DataSource{ProducerId: proto.Int32(1),
			DsDescriptor: &DataSourceDescriptor{Name: proto.String(fmt.Sprintf("some.rather.long.data.source.name.%05d", i))}})
	}
	if proto.Size(st) <= MaxFrameSize {
		t.Fatalf("state of %d bytes fits a frame: not a test", proto.Size(st))
	}
	h := NewHost(NewConsumerPort(stateBackend{st}))
	defer h.Close()
	c := pair(t, h)
	c.bind("ConsumerPort")
	rid := c.invoke(1, mQueryServiceState, &QueryServiceStateRequest{}, false, -1)
	merged := &TracingServiceState{}
	for parts := 1; ; parts++ {
		f := c.recv()
		r := f.GetMsgInvokeMethodReply()
		var part QueryServiceStateResponse
		if f.GetRequestId() != rid || !r.GetSuccess() || proto.Unmarshal(r.GetReplyProto(), &part) != nil {
			t.Fatalf("part %d: %v", parts, f)
		}
		proto.Merge(merged, part.GetServiceState())
		if !r.GetHasMore() {
			if parts < 3 {
				t.Fatalf("%d parts", parts)
			}
			break
		}
	}
	if !proto.Equal(merged, st) {
		t.Fatalf("merged state differs: %d data sources of %d", len(merged.DataSources), len(st.DataSources))
	}
	// An EnableTracing the backend refuses ends at once with its error.
	rid = c.invoke(1, mEnableTracing, &EnableTracingRequest{TraceConfig: []byte{}}, false, -1)
	f := c.recv()
	var er EnableTracingResponse
	if f.GetRequestId() != rid || proto.Unmarshal(f.GetMsgInvokeMethodReply().GetReplyProto(), &er) != nil || !er.GetDisabled() || er.GetError() != "no sessions here" {
		t.Fatalf("EnableTracing: %v", f)
	}
}

// fakeSession holds packets for ReadBuffers.
type fakeSession struct {
	pkts [][]byte
	done chan struct{}
	once sync.Once

	mu       sync.Mutex
	started  bool
	observed []uint32 // masks Observe was called with
}

func (s *fakeSession) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return fmt.Errorf("already started")
	}
	s.started = true
	return nil
}
func (s *fakeSession) ChangeTraceConfig([]byte) error { return fmt.Errorf("not supported") }

// Observe sends one event of each type the mask asks for at once.
func (s *fakeSession) Observe(mask uint32, emit func(*ObservableEvents)) (func(), error) {
	s.mu.Lock()
	s.observed = append(s.observed, mask)
	s.mu.Unlock()
	ev := &ObservableEvents{}
	if mask&uint32(ObservableEvents_TYPE_DATA_SOURCES_INSTANCES) != 0 {
		ev.InstanceStateChanges = []*ObservableEvents_DataSourceInstanceStateChange{{ProducerName: proto.String("p"),
			DataSourceName: proto.String("d"), State: ObservableEvents_DATA_SOURCE_INSTANCE_STATE_STARTED.Enum()}}
	}
	if mask&uint32(ObservableEvents_TYPE_ALL_DATA_SOURCES_STARTED) != 0 {
		ev.AllDataSourcesStarted = proto.Bool(true)
	}
	emit(ev)
	return func() {}, nil
}

// end ends the session (once).
func (s *fakeSession) end() { s.once.Do(func() { close(s.done) }) }

func (s *fakeSession) Done() <-chan struct{}             { return s.done }
func (s *fakeSession) Err() error                        { return nil }
func (s *fakeSession) Disable()                          { s.end() }
func (s *fakeSession) Flush(time.Duration, uint64) error { return nil }
func (s *fakeSession) Free()                             {}
func (s *fakeSession) TraceStats() ([]byte, error)       { return nil, nil }
func (s *fakeSession) WritesIntoFile() bool              { return false }
func (s *fakeSession) ReadPackets(max int) [][]byte {
	n, size := 0, 0
	for n < len(s.pkts) && (n == 0 || size+len(s.pkts[n]) <= max) {
		size += len(s.pkts[n])
		n++
	}
	out := s.pkts[:n]
	s.pkts = s.pkts[n:]
	return out
}

type sessionBackend struct{ s *fakeSession }

func (b sessionBackend) EnableTracing(Peer, []byte, int) (ConsumerSession, error) { return b.s, nil }
func (b sessionBackend) QueryServiceState(Peer, bool) *TracingServiceState        { return nil }
func (b sessionBackend) CloneSession(_ Peer, r *CloneSessionRequest) (ConsumerSession, *CloneSessionResponse) {
	if r.GetSessionId() != 7 {
		return nil, &CloneSessionResponse{Success: proto.Bool(false), Error: proto.String("no session 7")}
	}
	clone := &fakeSession{pkts: [][]byte{[]byte("cloned")}, done: make(chan struct{})}
	clone.end()
	return clone, &CloneSessionResponse{Success: proto.Bool(true), UuidMsb: proto.Int64(1), UuidLsb: proto.Int64(2)}
}

// ReadBuffers cuts packets into slices across ~32 KiB replies: a packet
// larger than a reply straddles several, the last slice of each packet
// says so, and the packets rebuild exactly.
func TestReadBuffersSlicesPackets(t *testing.T) {
	var want [][]byte
	for i, n := range []int{10, 100 << 10, 0, 5, 40 << 10, 32 << 10, 1} {
		want = append(want, bytes.Repeat([]byte{byte(i + 1)}, n))
	}
	sess := &fakeSession{pkts: append([][]byte(nil), want...), done: make(chan struct{})}
	h := NewHost(NewConsumerPort(sessionBackend{sess}))
	defer h.Close()
	c := pair(t, h)
	c.bind("ConsumerPort")
	c.invoke(1, mEnableTracing, &EnableTracingRequest{TraceConfig: []byte{}}, false, -1)
	rid := c.invoke(1, mReadBuffers, &ReadBuffersRequest{}, false, -1)
	var got [][]byte
	var cur []byte
	replies := 0
	for {
		f := c.recv()
		if f.GetRequestId() != rid {
			t.Fatalf("unexpected %v", f)
		}
		replies++
		r := f.GetMsgInvokeMethodReply()
		var rb ReadBuffersResponse
		if err := proto.Unmarshal(r.GetReplyProto(), &rb); err != nil || len(r.GetReplyProto()) > 40<<10 {
			t.Fatalf("reply %d: %d bytes, %v", replies, len(r.GetReplyProto()), err)
		}
		for _, s := range rb.GetSlices() {
			cur = append(cur, s.GetData()...)
			if s.GetLastSliceForPacket() {
				got = append(got, cur)
				cur = nil
			}
		}
		if !r.GetHasMore() {
			break
		}
	}
	if cur != nil || len(got) != len(want) || replies < 5 {
		t.Fatalf("%d packets in %d replies (want %d), %d bytes pending", len(got), replies, len(want), len(cur))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("packet %d: %d bytes, want %d", i, len(got[i]), len(want[i]))
		}
	}
	sess.end() // ends the EnableTracing wait
}

// Detach leaves the session running without its consumer; Attach with
// the same key (and uid) takes it over and returns its TraceConfig; the
// attached consumer's EnableTracing{attach_notification_only} is answered
// when the session ends. An unknown key fails with the bytes traced sent
// (capture i_attach_unknown_key).
func TestDetachAttach(t *testing.T) {
	sess := &fakeSession{done: make(chan struct{})}
	h := NewHost(NewConsumerPort(sessionBackend{sess}))
	defer h.Close()
	a := pair(t, h)
	a.bind("ConsumerPort")
	tc := []byte{0x18, 0xd0, 0x0f} // duration_ms: 2000
	a.invoke(1, mEnableTracing, &EnableTracingRequest{TraceConfig: tc}, false, -1)
	rid := a.invoke(1, mDetach, &DetachRequest{Key: proto.String("golden")}, false, -1)
	if f := a.recv(); f.GetRequestId() != rid || !f.GetMsgInvokeMethodReply().GetSuccess() {
		t.Fatalf("Detach: %v", f)
	}
	a.close() // the session survives its consumer

	b := pair(t, h)
	b.bind("ConsumerPort")
	b.invoke(1, mAttach, &AttachRequest{Key: proto.String("nosuchkey")}, false, -1)
	f := b.recv()
	if raw, _ := AppendFrame(nil, f); hex.EncodeToString(raw) != "06000000100232021000" {
		t.Fatalf("failed Attach %x, traced sent 06000000100232021000", raw)
	}
	rid = b.invoke(1, mAttach, &AttachRequest{Key: proto.String("golden")}, false, -1)
	f = b.recv()
	var ar AttachResponse
	if f.GetRequestId() != rid || proto.Unmarshal(f.GetMsgInvokeMethodReply().GetReplyProto(), &ar) != nil || !bytes.Equal(ar.GetTraceConfig(), tc) {
		t.Fatalf("Attach: %v", f)
	}
	rid = b.invoke(1, mEnableTracing, &EnableTracingRequest{AttachNotificationOnly: proto.Bool(true)}, false, -1)
	sess.end()
	f = b.recv()
	var er EnableTracingResponse
	if f.GetRequestId() != rid || proto.Unmarshal(f.GetMsgInvokeMethodReply().GetReplyProto(), &er) != nil || !er.GetDisabled() {
		t.Fatalf("end of the attached session: %v", f)
	}
}

// peerBackend records the peer QueryServiceState was asked for.
type peerBackend struct {
	stateBackend
	got chan Peer
}

func (b peerBackend) QueryServiceState(p Peer, _ bool) *TracingServiceState {
	b.got <- p
	return b.st
}

// The port asks the backend on behalf of the socket's peer (SO_PEERCRED),
// which decides the sessions listed.
func TestQueryServiceStateGetsThePeer(t *testing.T) {
	b := peerBackend{stateBackend{&TracingServiceState{NumSessions: proto.Int32(0)}}, make(chan Peer, 1)}
	h := NewHost(NewConsumerPort(b))
	defer h.Close()
	c := pair(t, h)
	c.bind("ConsumerPort")
	rid := c.invoke(1, mQueryServiceState, &QueryServiceStateRequest{}, false, -1)
	if f := c.recv(); f.GetRequestId() != rid || !f.GetMsgInvokeMethodReply().GetSuccess() {
		t.Fatalf("reply %v", f)
	}
	if p := <-b.got; p.UID != uint32(os.Getuid()) || p.PID != int32(os.Getpid()) {
		t.Fatalf("peer %+v, want this process (uid %d pid %d)", p, os.Getuid(), os.Getpid())
	}
}
