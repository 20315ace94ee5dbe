package perfettoipc

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
)

type stateBackend struct{ st *TracingServiceState }

func (b stateBackend) EnableTracing(Peer, []byte, int) (ConsumerSession, error) {
	return nil, fmt.Errorf("no sessions here")
}
func (b stateBackend) QueryServiceState(bool) *TracingServiceState { return b.st }

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
