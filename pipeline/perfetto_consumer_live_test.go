package pipeline

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	ipc "github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/tracefile"
)

// liveDouble connects a producer double serving test.perfetto_double and
// waits until it registered.
func liveDouble(t *testing.T, prodSock string, reg *PerfettoProducers, packets int, ignoreFlush bool) *perfettoDouble {
	t.Helper()
	pd := dialDouble(t, prodSock, packets)
	pd.ignoreFlush = ignoreFlush
	pd.connect("go-double", &ipc.DataSourceDescriptor{Name: proto.String("test.perfetto_double"),
		WillNotifyOnStart: proto.Bool(true), WillNotifyOnStop: proto.Bool(true)})
	served := make(chan error, 1)
	go pd.serve(served)
	t.Cleanup(func() {
		pd.close()
		if err := <-served; err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if missing := reg.WaitFor(ctx, []string{"test.perfetto_double"}); len(missing) > 0 {
		t.Fatal(missing)
	}
	return pd
}

// waitCommand waits (bounded) until the double received cmd.
func (pd *perfettoDouble) waitCommand(cmd string) {
	pd.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pd.mu.Lock()
		has := slices.Contains(pd.commands, cmd)
		pd.mu.Unlock()
		if has {
			return
		}
		if time.Now().After(deadline) {
			pd.t.Fatalf("the producer never got %s", cmd)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (pd *perfettoDouble) count(cmd string) int {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	n := 0
	for _, c := range pd.commands {
		if c == cmd {
			n++
		}
	}
	return n
}

// traceStatsReply asks GetTraceStats and decodes the reply.
func (c *consumerClient) traceStats() tracefile.TraceStats {
	t := c.pd.t
	t.Helper()
	r := c.reply(c.pd.invoke("GetTraceStats", &ipc.GetTraceStatsRequest{}, false))
	var resp ipc.GetTraceStatsResponse
	if !r.GetSuccess() || proto.Unmarshal(r.GetReplyProto(), &resp) != nil {
		t.Fatalf("GetTraceStats reply %v", r)
	}
	ts, err := tracefile.DecodeTraceStats(resp.GetTraceStats())
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// A consumer's Flush during a long session really flushes, as the
// perfetto command's Ctrl-C does (capture e): the producer gets a Flush
// command, its commit and ack land in the buffer before the reply, and
// GetTraceStats, asked while the session runs, shows the flush and the
// chunks it brought.
func TestPerfettoConsumerFlushFlushes(t *testing.T) {
	prodSock, consSock, reg := perfettoService(t)
	const packets = 400
	pd := liveDouble(t, prodSock, reg, packets, false)
	c := dialConsumer(t, consSock)
	defer c.pd.close()
	enable := c.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: traceConfig(60_000, false, "test.perfetto_double")}, false)
	pd.waitCommand("start_data_source")

	before := c.traceStats()
	if before.FlushesRequested != 0 || len(before.BufferStats) != 1 || before.ProducersConnected != 1 {
		t.Fatalf("stats before the flush: %d flushes, %d buffers, %d producers", before.FlushesRequested, len(before.BufferStats), before.ProducersConnected)
	}
	r := c.reply(c.pd.invoke("Flush", &ipc.FlushRequest{TimeoutMs: proto.Uint32(10_000), Flags: proto.Uint64(34)}, false))
	if !r.GetSuccess() {
		t.Fatalf("Flush reply %v", r)
	}
	if pd.count("flush") != 1 {
		t.Fatalf("producer commands %q: want exactly one flush before the reply", pd.commands)
	}
	live := c.traceStats()
	if live.FlushesRequested != 1 || live.FlushesSucceeded != 1 || live.FlushesFailed != 0 {
		t.Fatalf("after the flush: requested %d succeeded %d failed %d", live.FlushesRequested, live.FlushesSucceeded, live.FlushesFailed)
	}
	if b := live.BufferStats[0]; b.ChunksWritten == 0 || b.BytesWritten < uint64(packets*12) {
		t.Fatalf("the flush brought %d chunks, %d bytes into the buffer", b.ChunksWritten, b.BytesWritten)
	}
	if pd.count("stop_data_source") != 0 {
		t.Fatal("the session stopped: the stats were not live")
	}

	// DisableTracing ends it; everything the producer wrote is read back.
	if r := c.reply(c.pd.invoke("DisableTracing", &ipc.DisableTracingRequest{}, false)); !r.GetSuccess() {
		t.Fatalf("DisableTracing reply %v", r)
	}
	if r := c.reply(enable); !r.GetSuccess() {
		t.Fatalf("EnableTracing reply %v", r)
	}
	if got := countDoublePackets(t, c.readAll()); got != packets {
		t.Fatalf("%d of %d producer packets read back", got, packets)
	}
}

// A producer that never acknowledges makes the consumer's Flush fail
// after the request's timeout, as traced answers it (no success field);
// the stats count the failed flush.
func TestPerfettoConsumerFlushTimesOut(t *testing.T) {
	prodSock, consSock, reg := perfettoService(t)
	pd := liveDouble(t, prodSock, reg, 10, true)
	c := dialConsumer(t, consSock)
	defer c.pd.close()
	tc := traceConfig(60_000, false, "test.perfetto_double")
	tc = protowire.AppendTag(tc, 14, protowire.VarintType) // flush_timeout_ms: the final flush
	tc = protowire.AppendVarint(tc, 200)
	enable := c.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: tc}, false)
	pd.waitCommand("start_data_source")
	r := c.reply(c.pd.invoke("Flush", &ipc.FlushRequest{TimeoutMs: proto.Uint32(200)}, false))
	if r.Success != nil || r.GetHasMore() {
		t.Fatalf("Flush of an unanswered flush: %v", r)
	}
	if pd.count("flush") != 1 {
		t.Fatalf("producer commands %q", pd.commands)
	}
	if st := c.traceStats(); st.FlushesFailed != 1 || st.FlushesSucceeded != 0 {
		t.Fatalf("flushes failed %d succeeded %d", st.FlushesFailed, st.FlushesSucceeded)
	}
	c.reply(c.pd.invoke("DisableTracing", &ipc.DisableTracingRequest{}, false))
	c.reply(enable)
}

// readAll drains ReadBuffers into whole packets.
func (c *consumerClient) readAll() [][]byte {
	t := c.pd.t
	t.Helper()
	read := c.pd.invoke("ReadBuffers", &ipc.ReadBuffersRequest{}, false)
	var pkts [][]byte
	var cur []byte
	for {
		r := c.reply(read)
		var rb ipc.ReadBuffersResponse
		if !r.GetSuccess() || proto.Unmarshal(r.GetReplyProto(), &rb) != nil {
			t.Fatalf("ReadBuffers reply %v", r)
		}
		for _, s := range rb.GetSlices() {
			cur = append(cur, s.GetData()...)
			if s.GetLastSliceForPacket() {
				pkts = append(pkts, cur)
				cur = nil
			}
		}
		if !r.GetHasMore() {
			return pkts
		}
	}
}

// replyWithEvents waits for the reply to rid, collecting the
// ObserveEvents stream's events (request obs) that arrive meanwhile.
func (c *consumerClient) replyWithEvents(rid, obs uint64, events *[]*ipc.ObservableEvents) *ipc.Frame_InvokeMethodReply {
	t := c.pd.t
	t.Helper()
	for {
		f, _, err := c.pd.recv()
		if err != nil {
			t.Fatalf("waiting for reply %d: %v", rid, err)
		}
		r := f.GetMsgInvokeMethodReply()
		switch f.GetRequestId() {
		case obs:
			var er ipc.ObserveEventsResponse
			if !r.GetSuccess() || !r.GetHasMore() || proto.Unmarshal(r.GetReplyProto(), &er) != nil {
				t.Fatalf("ObserveEvents reply %v", r)
			}
			*events = append(*events, er.GetEvents())
		case rid:
			return r
		}
	}
}

// The perfetto command's --background-wait path: ObserveEvents before a
// deferred_start EnableTracing; nothing reaches the producer until
// StartTracing; then the instance's STARTED change and
// all_data_sources_started arrive on the stream, and its STOPPED change
// when DisableTracing stopped it.
func TestPerfettoConsumerObserveDeferredStart(t *testing.T) {
	prodSock, consSock, reg := perfettoService(t)
	pd := liveDouble(t, prodSock, reg, 20, false)
	c := dialConsumer(t, consSock)
	defer c.pd.close()
	obs := c.pd.invoke("ObserveEvents", &ipc.ObserveEventsRequest{EventsToObserve: []uint32{1, 2}}, false)
	tc := traceConfig(60_000, false, "test.perfetto_double")
	tc = protowire.AppendTag(tc, 12, protowire.VarintType) // deferred_start
	tc = protowire.AppendVarint(tc, 1)
	enable := c.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: tc}, false)
	var events []*ipc.ObservableEvents
	// Not started: a flush fails and the producer was told nothing.
	if r := c.replyWithEvents(c.pd.invoke("Flush", &ipc.FlushRequest{}, false), obs, &events); r.Success != nil {
		t.Fatalf("Flush of a deferred session: %v", r)
	}
	pd.mu.Lock()
	early := len(pd.commands)
	pd.mu.Unlock()
	if early != 0 || len(events) != 0 {
		t.Fatalf("before StartTracing: producer commands %q, events %v", pd.commands, events)
	}
	if r := c.replyWithEvents(c.pd.invoke("StartTracing", &ipc.StartTracingRequest{}, false), obs, &events); !r.GetSuccess() {
		t.Fatalf("StartTracing: %v", r)
	}
	pd.waitCommand("start_data_source")
	// The events come on their own; a GetTraceStats round trip at a time
	// until both are in (bounded).
	started := func() (inst, all bool) {
		for _, ev := range events {
			for _, ch := range ev.GetInstanceStateChanges() {
				if ch.GetProducerName() == "go-double" && ch.GetDataSourceName() == "test.perfetto_double" &&
					ch.GetState() == ipc.ObservableEvents_DATA_SOURCE_INSTANCE_STATE_STARTED {
					inst = true
				}
			}
			all = all || ev.GetAllDataSourcesStarted()
		}
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for inst, all := started(); !inst || !all; inst, all = started() {
		if time.Now().After(deadline) {
			t.Fatalf("events %v", events)
		}
		c.replyWithEvents(c.pd.invoke("GetTraceStats", &ipc.GetTraceStatsRequest{}, false), obs, &events)
	}
	n := len(events)
	c.replyWithEvents(c.pd.invoke("DisableTracing", &ipc.DisableTracingRequest{}, false), obs, &events)
	if r := c.replyWithEvents(enable, obs, &events); !r.GetSuccess() {
		t.Fatalf("EnableTracing reply %v", r)
	}
	var stopped bool
	for _, ev := range events[n:] {
		for _, ch := range ev.GetInstanceStateChanges() {
			stopped = stopped || ch.GetState() == ipc.ObservableEvents_DATA_SOURCE_INSTANCE_STATE_STOPPED
		}
	}
	if !stopped {
		t.Fatalf("no STOPPED change after DisableTracing: %v", events[n:])
	}
}

// CloneSession from a second consumer, by unique_session_name: the clone
// is a complete trace of its own (the clone trigger packet, every producer
// packet committed so far) read with ReadBuffers, while the original
// session records on and ends with all its packets too.
func TestPerfettoConsumerCloneSession(t *testing.T) {
	prodSock, consSock, reg := perfettoService(t)
	const packets = 300
	pd := liveDouble(t, prodSock, reg, packets, false)
	a := dialConsumer(t, consSock)
	defer a.pd.close()
	tc := traceConfig(60_000, false, "test.perfetto_double")
	tc = protowire.AppendTag(tc, 22, protowire.BytesType) // unique_session_name
	tc = protowire.AppendString(tc, "golden-clone")
	enable := a.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: tc}, false)
	// Once the original's Flush is answered, the producer has started and
	// committed everything it wrote.
	if r := a.reply(a.pd.invoke("Flush", &ipc.FlushRequest{TimeoutMs: proto.Uint32(10_000)}, false)); !r.GetSuccess() {
		t.Fatalf("Flush: %v", r)
	}

	b := dialConsumer(t, consSock)
	defer b.pd.close()
	var cr ipc.CloneSessionResponse
	r := b.reply(b.pd.invoke("CloneSession", &ipc.CloneSessionRequest{Selector: &ipc.CloneSessionRequest_SessionId{SessionId: 99}}, false))
	if proto.Unmarshal(r.GetReplyProto(), &cr) != nil || cr.GetSuccess() || !strings.Contains(cr.GetError(), "no such running session") {
		t.Fatalf("clone of session 99: %v", &cr)
	}
	r = b.reply(b.pd.invoke("CloneSession", &ipc.CloneSessionRequest{Selector: &ipc.CloneSessionRequest_UniqueSessionName{UniqueSessionName: "golden-clone"},
		CloneTriggerName: proto.String("golden-trigger")}, false))
	if proto.Unmarshal(r.GetReplyProto(), &cr) != nil || !cr.GetSuccess() || cr.GetUuidMsb() == 0 && cr.GetUuidLsb() == 0 || cr.GetWasWriteIntoFile() {
		t.Fatalf("clone: %v", &cr)
	}
	if pd.count("flush") != 2 || pd.count("stop_data_source") != 0 {
		t.Fatalf("producer commands %q: the clone flushes (after the original's Flush), the session goes on", pd.commands)
	}
	cloned := b.readAll()
	if got := countDoublePackets(t, cloned); got != packets {
		t.Fatalf("%d of %d producer packets in the clone", got, packets)
	}
	var trig bool
	for _, p := range cloned {
		trig = trig || bytes.Contains(p, []byte("golden-trigger"))
	}
	if !trig {
		t.Fatal("the clone has no clone_snapshot_trigger packet naming the trigger")
	}
	// The original records on: its own stats still run, and it ends whole.
	if st := a.traceStats(); st.FlushesSucceeded < 1 {
		t.Fatalf("original session after the clone: %d flushes", st.FlushesSucceeded)
	}
	a.reply(a.pd.invoke("DisableTracing", &ipc.DisableTracingRequest{}, false))
	a.reply(enable)
	if got := countDoublePackets(t, a.readAll()); got != packets {
		t.Fatalf("%d of %d producer packets in the original", got, packets)
	}
}
