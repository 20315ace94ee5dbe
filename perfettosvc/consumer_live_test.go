package perfettosvc

import (
	"bytes"
	"context"
	"encoding/binary"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/transport/perfetto"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	ipc "github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/tracefile"
)

// liveDouble connects a producer double serving test.perfetto_double and
// waits until it registered.
func liveDouble(t *testing.T, prodSock string, reg *perfetto.Producers, packets int, ignoreFlush bool) *perfettoDouble {
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
	// The consumer's flags (TRACE_STOP | PERFETTO_CMD) reach the producer,
	// as traced passes them on (capture e).
	pd.mu.Lock()
	flags := pd.flushFlags
	pd.mu.Unlock()
	if len(flags) != 1 || flags[0] != 34 {
		t.Fatalf("flush flags %v at the producer, want [34] as the consumer sent", flags)
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
	for _, r := range c.pending[obs] { // events read by an earlier reply
		var er ipc.ObserveEventsResponse
		if proto.Unmarshal(r.GetReplyProto(), &er) == nil {
			*events = append(*events, er.GetEvents())
		}
	}
	delete(c.pending, obs)
	if q := c.pending[rid]; len(q) > 0 {
		c.pending[rid] = q[1:]
		return q[0]
	}
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
		default:
			c.stash(f)
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

// filteredConfig is a TraceConfig with one buffer and data source
// test.perfetto_double limited to producers (producer_name_filter).
func filteredConfig(durationMs uint64, producers ...string) []byte {
	buf := protowire.AppendTag(nil, 1, protowire.VarintType)
	buf = protowire.AppendVarint(buf, 4096)
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, buf)
	dsc := protowire.AppendTag(nil, 1, protowire.BytesType)
	dsc = protowire.AppendString(dsc, "test.perfetto_double")
	ds := protowire.AppendTag(nil, 1, protowire.BytesType)
	ds = protowire.AppendBytes(ds, dsc)
	for _, p := range producers {
		ds = protowire.AppendTag(ds, 2, protowire.BytesType)
		ds = protowire.AppendString(ds, p)
	}
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, ds)
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	return protowire.AppendVarint(b, durationMs)
}

// markerPackets counts the doubles' packets in a trace (each double
// writes its own, with the same numbers).
func markerPackets(t *testing.T, pkts [][]byte) int {
	t.Helper()
	n := 0
	for _, p := range pkts {
		if _, _, body, ok := tracetest.ScriptedID(p); ok && binary.LittleEndian.Uint32(body) == 0xd0b1e {
			n++
		}
	}
	return n
}

// producer_name_filter picks the producers that serve a data source; a
// ChangeTraceConfig that widens it starts the data source on the newly
// admitted producer in the running session (traced's one supported
// change), and any other change is refused.
func TestPerfettoConsumerProducerFilterChange(t *testing.T) {
	prodSock, consSock, reg := perfettoService(t)
	const na, nb = 120, 80
	a := dialDouble(t, prodSock, na)
	a.connect("double-a", &ipc.DataSourceDescriptor{Name: proto.String("test.perfetto_double"), WillNotifyOnStart: proto.Bool(true)})
	b := dialDouble(t, prodSock, nb)
	b.connect("double-b", &ipc.DataSourceDescriptor{Name: proto.String("test.perfetto_double"), WillNotifyOnStart: proto.Bool(true)})
	for _, pd := range []*perfettoDouble{a, b} {
		served := make(chan error, 1)
		go pd.serve(served)
		t.Cleanup(func() {
			pd.close()
			if err := <-served; err != nil {
				t.Error(err)
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(reg.DataSources()) < 2 {
		if reg.WaitFor(ctx, []string{"test.perfetto_double"}); ctx.Err() != nil {
			t.Fatal("the doubles never registered")
		}
		time.Sleep(5 * time.Millisecond)
	}

	c := dialConsumer(t, consSock)
	defer c.pd.close()
	enable := c.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: filteredConfig(60_000, "double-a")}, false)
	if r := c.reply(c.pd.invoke("Flush", &ipc.FlushRequest{TimeoutMs: proto.Uint32(10_000)}, false)); !r.GetSuccess() {
		t.Fatalf("Flush: %v", r)
	}
	if a.count("start_data_source") != 1 || b.count("setup_data_source test.perfetto_double") != 0 {
		t.Fatalf("filter [double-a]: a got %q, b got %q", a.commands, b.commands)
	}
	// Another change than the filter: refused, nothing started.
	if r := c.reply(c.pd.invoke("ChangeTraceConfig", &ipc.ChangeTraceConfigRequest{TraceConfig: filteredConfig(30_000, "double-a", "double-b")}, false)); r.Success != nil {
		t.Fatalf("ChangeTraceConfig of the duration: %v", r)
	}
	if r := c.reply(c.pd.invoke("ChangeTraceConfig", &ipc.ChangeTraceConfigRequest{TraceConfig: filteredConfig(60_000, "double-a", "double-b")}, false)); !r.GetSuccess() {
		t.Fatalf("ChangeTraceConfig of the filter: %v", r)
	}
	b.waitCommand("start_data_source")
	if r := c.reply(c.pd.invoke("Flush", &ipc.FlushRequest{TimeoutMs: proto.Uint32(10_000)}, false)); !r.GetSuccess() {
		t.Fatalf("Flush after the change: %v", r)
	}
	c.reply(c.pd.invoke("DisableTracing", &ipc.DisableTracingRequest{}, false))
	c.reply(enable)
	if got := markerPackets(t, c.readAll()); got != na+nb {
		t.Fatalf("%d producer packets, want %d from double-a and %d from double-b", got, na, nb)
	}
	if a.count("start_data_source") != 1 || b.count("start_data_source") != 1 {
		t.Fatalf("a got %q, b got %q", a.commands, b.commands)
	}
}
