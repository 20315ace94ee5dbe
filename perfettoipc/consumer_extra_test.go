package perfettoipc

import (
	"testing"

	"google.golang.org/protobuf/proto"
)

// QueryCapabilities answers with traced's capability fields, saying what
// tracepipe serves: the query itself, clones, the two observable event
// types; not output_path.
func TestQueryCapabilities(t *testing.T) {
	h := NewHost(NewConsumerPort(stateBackend{}))
	defer h.Close()
	c := pair(t, h)
	c.bind("ConsumerPort")
	rid := c.invoke(1, mQueryCapabilities, &QueryCapabilitiesRequest{}, false, -1)
	f := c.recv()
	var resp QueryCapabilitiesResponse
	if f.GetRequestId() != rid || !f.GetMsgInvokeMethodReply().GetSuccess() || proto.Unmarshal(f.GetMsgInvokeMethodReply().GetReplyProto(), &resp) != nil {
		t.Fatalf("QueryCapabilities: %v", f)
	}
	caps := resp.GetCapabilities()
	if !caps.GetHasQueryCapabilities() || !caps.GetHasCloneSession() || caps.GetHasTraceConfigOutputPath() ||
		len(caps.GetObservableEvents()) != 3 || caps.GetObservableEvents()[0] != ObservableEvents_TYPE_DATA_SOURCES_INSTANCES ||
		caps.GetObservableEvents()[1] != ObservableEvents_TYPE_ALL_DATA_SOURCES_STARTED ||
		caps.GetObservableEvents()[2] != ObservableEvents_TYPE_CLONE_TRIGGER_HIT {
		t.Fatalf("capabilities %v", caps)
	}
	// Perfetto's field numbers: has_query_capabilities 1, observable_events 2,
	// has_trace_config_output_path 3, has_clone_session 4.
	raw, _ := proto.Marshal(caps)
	want := []byte{0x08, 1, 0x10, 1, 0x10, 2, 0x10, 4, 0x18, 0, 0x20, 1}
	if string(raw) != string(want) {
		t.Fatalf("capabilities encode as %x, want %x", raw, want)
	}
}

// ObserveEvents sent before EnableTracing is kept and connected to the
// session once enabled, with the OR of the requested types as traced's
// mask; events stream as has_more replies. StartTracing starts a session
// once; ChangeTraceConfig the session refuses fails.
func TestObserveEventsStartTracing(t *testing.T) {
	sess := &fakeSession{done: make(chan struct{})}
	h := NewHost(NewConsumerPort(sessionBackend{sess}))
	defer h.Close()
	c := pair(t, h)
	c.bind("ConsumerPort")
	obs := c.invoke(1, mObserveEvents, &ObserveEventsRequest{EventsToObserve: []uint32{1, 2}}, false, -1)
	c.invoke(1, mEnableTracing, &EnableTracingRequest{TraceConfig: []byte{}}, false, -1)
	f := c.recv()
	var er ObserveEventsResponse
	if f.GetRequestId() != obs || !f.GetMsgInvokeMethodReply().GetHasMore() || proto.Unmarshal(f.GetMsgInvokeMethodReply().GetReplyProto(), &er) != nil {
		t.Fatalf("event: %v", f)
	}
	ev := er.GetEvents()
	if !ev.GetAllDataSourcesStarted() || len(ev.GetInstanceStateChanges()) != 1 ||
		ev.GetInstanceStateChanges()[0].GetState() != ObservableEvents_DATA_SOURCE_INSTANCE_STATE_STARTED {
		t.Fatalf("events %v", ev)
	}
	sess.mu.Lock()
	masks := sess.observed
	sess.mu.Unlock()
	if len(masks) != 1 || masks[0] != 3 {
		t.Fatalf("observed with masks %v, want [3]", masks)
	}
	for i, wantOK := range []bool{true, false} {
		rid := c.invoke(1, mStartTracing, &StartTracingRequest{}, false, -1)
		f := c.recv()
		for f.GetRequestId() == obs { // a started session is observed anew
			f = c.recv()
		}
		if f.GetRequestId() != rid || f.GetMsgInvokeMethodReply().GetSuccess() != wantOK {
			t.Fatalf("StartTracing %d: %v", i, f)
		}
	}
	rid := c.invoke(1, mChangeTraceConfig, &ChangeTraceConfigRequest{TraceConfig: []byte{}}, false, -1)
	f = c.recv()
	for f.GetRequestId() == obs { // the start's events may still be on their way
		f = c.recv()
	}
	if f.GetRequestId() != rid || f.GetMsgInvokeMethodReply().Success != nil {
		t.Fatalf("ChangeTraceConfig: %v", f)
	}
	sess.end()
}

// CloneSession gives a connection without a session the clone, which
// ReadBuffers then drains; a failed clone answers success false with the
// backend's error.
func TestCloneSessionServesClone(t *testing.T) {
	sess := &fakeSession{done: make(chan struct{})}
	h := NewHost(NewConsumerPort(sessionBackend{sess}))
	defer h.Close()
	c := pair(t, h)
	c.bind("ConsumerPort")
	rid := c.invoke(1, mCloneSession, &CloneSessionRequest{Selector: &CloneSessionRequest_SessionId{SessionId: 8}}, false, -1)
	f := c.recv()
	var cr CloneSessionResponse
	if f.GetRequestId() != rid || proto.Unmarshal(f.GetMsgInvokeMethodReply().GetReplyProto(), &cr) != nil || cr.GetSuccess() || cr.GetError() != "no session 7" {
		t.Fatalf("clone of an unknown session: %v", f)
	}
	rid = c.invoke(1, mCloneSession, &CloneSessionRequest{Selector: &CloneSessionRequest_SessionId{SessionId: 7}}, false, -1)
	f = c.recv()
	if f.GetRequestId() != rid || proto.Unmarshal(f.GetMsgInvokeMethodReply().GetReplyProto(), &cr) != nil || !cr.GetSuccess() || cr.GetUuidLsb() != 2 {
		t.Fatalf("clone: %v", f)
	}
	rid = c.invoke(1, mReadBuffers, &ReadBuffersRequest{}, false, -1)
	f = c.recv()
	var rb ReadBuffersResponse
	if f.GetRequestId() != rid || proto.Unmarshal(f.GetMsgInvokeMethodReply().GetReplyProto(), &rb) != nil || len(rb.GetSlices()) != 1 || string(rb.GetSlices()[0].GetData()) != "cloned" {
		t.Fatalf("ReadBuffers of the clone: %v", f)
	}
	// A second clone on the same connection is refused.
	rid = c.invoke(1, mCloneSession, &CloneSessionRequest{Selector: &CloneSessionRequest_SessionId{SessionId: 7}}, false, -1)
	f = c.recv()
	if f.GetRequestId() != rid || proto.Unmarshal(f.GetMsgInvokeMethodReply().GetReplyProto(), &cr) != nil || cr.GetSuccess() {
		t.Fatalf("second clone: %v", f)
	}
}
