package perfettosvc

import (
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/transport/perfetto"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	ipc "github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/tracefile"
)

// withTriggerConfig appends TraceConfig.trigger_config{mode, triggers
// (name, stop_delay_ms), trigger_timeout_ms} to a TraceConfig.
func withTriggerConfig(tc []byte, mode uint64, timeoutMs uint64, triggers ...struct {
	name    string
	delayMs uint64
}) []byte {
	var cfg []byte
	cfg = protowire.AppendTag(cfg, 1, protowire.VarintType)
	cfg = protowire.AppendVarint(cfg, mode)
	for _, tr := range triggers {
		var t []byte
		t = protowire.AppendTag(t, 1, protowire.BytesType)
		t = protowire.AppendString(t, tr.name)
		t = protowire.AppendTag(t, 3, protowire.VarintType)
		t = protowire.AppendVarint(t, tr.delayMs)
		cfg = protowire.AppendTag(cfg, 2, protowire.BytesType)
		cfg = protowire.AppendBytes(cfg, t)
	}
	cfg = protowire.AppendTag(cfg, 3, protowire.VarintType)
	cfg = protowire.AppendVarint(cfg, timeoutMs)
	tc = protowire.AppendTag(tc, 17, protowire.BytesType)
	return protowire.AppendBytes(tc, cfg)
}

type trig = struct {
	name    string
	delayMs uint64
}

// triggerProducer connects as `perfetto --trigger NAME` does (a producer
// that initialises and calls ActivateTriggers) and activates names.
func triggerProducer(t *testing.T, sock, name string, names ...string) {
	t.Helper()
	pd := dialDouble(t, sock, 0)
	defer pd.close()
	pd.rid++
	_ = pd.send(&ipc.Frame{RequestId: proto.Uint64(pd.rid), Msg: &ipc.Frame_MsgBindService{MsgBindService: &ipc.Frame_BindService{ServiceName: proto.String("ProducerPort")}}})
	f, _, err := pd.recv()
	if err != nil || !f.GetMsgBindServiceReply().GetSuccess() {
		t.Fatalf("bind: %v %v", f, err)
	}
	for _, m := range f.GetMsgBindServiceReply().GetMethods() {
		pd.methods[m.GetName()] = m.GetId()
	}
	for _, rid := range []uint64{
		pd.invoke("InitializeConnection", &ipc.InitializeConnectionRequest{ProducerName: proto.String(name)}, false),
		pd.invoke("ActivateTriggers", &ipc.ActivateTriggersRequest{TriggerNames: names}, false),
	} {
		if f, _, err := pd.recv(); err != nil || f.GetRequestId() != rid || !f.GetMsgInvokeMethodReply().GetSuccess() {
			t.Fatalf("reply to %d: %v %v", rid, f, err)
		}
	}
}

// consumerTriggers returns the trigger names of a trace's trigger packets.
func consumerTriggers(t *testing.T, pkts [][]byte) []string {
	t.Helper()
	var names []string
	for _, p := range pkts {
		info, err := tracefile.DecodePacket(p)
		if err != nil {
			t.Fatal(err)
		}
		if info.PayloadField == 46 {
			names = append(names, stringField(info.Payload, 1))
		}
	}
	return names
}

// STOP_TRACING through the consumer port: the session records until a
// producer (as `perfetto --trigger`) activates the trigger, then ends,
// long before its duration; the trace holds the producer's data and the
// trigger packet.
func TestPerfettoTriggerStopTracing(t *testing.T) {
	prodSock, consSock, reg := perfettoService(t)
	const packets = 200
	pd := liveDouble(t, prodSock, reg, packets, false)
	c := dialConsumer(t, consSock)
	defer c.pd.close()
	tc := withTriggerConfig(traceConfig(600_000, false, "test.perfetto_double"), 2, 600_000, trig{"stop-now", 0})
	enable := c.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: tc}, false)
	pd.waitCommand("start_data_source")
	triggerProducer(t, prodSock, "perfetto_cmd", "unknown-trigger", "stop-now")
	// The reply comes when the session ends: the trigger's doing, as its
	// duration (600 s) is far beyond the reply's read deadline (30 s).
	if r := c.reply(enable); !r.GetSuccess() {
		t.Fatalf("EnableTracing reply %v", r)
	}
	pkts := c.readAll()
	if got := countDoublePackets(t, pkts); got != packets {
		t.Fatalf("%d of %d producer packets", got, packets)
	}
	if names := consumerTriggers(t, pkts); len(names) != 1 || names[0] != "stop-now" {
		t.Fatalf("trigger packets %q, want the one that acted", names)
	}
}

// START_TRACING through the consumer port: no data source starts before
// the trigger; the trigger starts them, and the session ends stop_delay
// after it.
func TestPerfettoTriggerStartTracing(t *testing.T) {
	prodSock, consSock, reg := perfettoService(t)
	const packets = 150
	pd := liveDouble(t, prodSock, reg, packets, false)
	c := dialConsumer(t, consSock)
	defer c.pd.close()
	tc := withTriggerConfig(traceConfig(600_000, false, "test.perfetto_double"), 1, 600_000, trig{"go", 200})
	enable := c.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: tc}, false)
	// The session exists and serves (its stats answer); nothing started.
	if st := c.traceStats(); st.TracingSessions != 1 {
		t.Fatalf("stats %+v", st)
	}
	if n := pd.count("start_data_source"); n != 0 {
		t.Fatalf("%d start_data_source before the trigger", n)
	}
	triggerProducer(t, prodSock, "perfetto_cmd", "go")
	pd.waitCommand("start_data_source")
	if r := c.reply(enable); !r.GetSuccess() {
		t.Fatalf("EnableTracing reply %v", r)
	}
	pkts := c.readAll()
	if got := countDoublePackets(t, pkts); got != packets {
		t.Fatalf("%d of %d producer packets", got, packets)
	}
	if names := consumerTriggers(t, pkts); len(names) != 1 || names[0] != "go" {
		t.Fatalf("trigger packets %q", names)
	}
}

// producer_name_regex_filter picks producers by a full match, OR'ed with
// producer_name_filter, as traced.
func TestPerfettoProducerNameRegexFilter(t *testing.T) {
	regexConfig := func(res ...string) []byte {
		tc := filteredConfig(60_000)
		// Rebuild the one data source with the regexes appended.
		var out []byte
		for b := tc; len(b) > 0; {
			n, typ, l := protowire.ConsumeTag(b)
			m := protowire.ConsumeFieldValue(n, typ, b[l:])
			if n == 2 {
				ds, _ := protowire.ConsumeBytes(b[l:])
				ds = append([]byte(nil), ds...)
				for _, re := range res {
					ds = protowire.AppendTag(ds, 3, protowire.BytesType)
					ds = protowire.AppendString(ds, re)
				}
				out = protowire.AppendTag(out, 2, protowire.BytesType)
				out = protowire.AppendBytes(out, ds)
			} else {
				out = append(out, b[:l+m]...)
			}
			b = b[l+m:]
		}
		return out
	}
	cfg, err := config.ConfigFromTraceConfig(regexConfig("go-d.*", "x"))
	if err != nil {
		t.Fatal(err)
	}
	f := &cfg.DataSources[0]
	for name, want := range map[string]bool{"go-double": true, "x": true, "xx": false, "a-go-double": false, "other": false} {
		if f.AdmitsProducer(name) != want {
			t.Errorf("producer %q admitted %v, want %v", name, !want, want)
		}
	}
	if _, err := config.ConfigFromTraceConfig(regexConfig("(")); err == nil || !strings.Contains(err.Error(), "data_sources[0]: producer_name_regex_filter[0]") {
		t.Fatalf("a bad expression: %v", err)
	}

	// Through the consumer port: a matching expression binds the producer.
	prodSock, consSock, reg := perfettoService(t)
	const packets = 100
	liveDouble(t, prodSock, reg, packets, false)
	c := dialConsumer(t, consSock)
	defer c.pd.close()
	tc := regexConfig("go-.*")
	tc = dropFieldNum(tc, 3)
	tc = protowire.AppendTag(tc, 3, protowire.VarintType)
	tc = protowire.AppendVarint(tc, 300)
	enable := c.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: tc}, false)
	if r := c.reply(enable); !r.GetSuccess() {
		t.Fatalf("EnableTracing reply %v", r)
	}
	if got := countDoublePackets(t, c.readAll()); got != packets {
		t.Fatalf("%d of %d packets of the producer the expression names", got, packets)
	}
}

// dropFieldNum removes top-level field num from a message.
func dropFieldNum(b []byte, num protowire.Number) []byte {
	var out []byte
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		m := protowire.ConsumeFieldValue(n, typ, b[l:])
		if n != num {
			out = append(out, b[:l+m]...)
		}
		b = b[l+m:]
	}
	return out
}

// The trigger_config mapping: every Trigger field, the two modes the
// engine runs for a consumer, and the rest refused by name.
func TestPerfettoTriggerConfigMapping(t *testing.T) {
	var tr []byte
	tr = protowire.AppendTag(tr, 1, protowire.BytesType)
	tr = protowire.AppendString(tr, "t1")
	tr = protowire.AppendTag(tr, 2, protowire.BytesType)
	tr = protowire.AppendString(tr, "perfetto_.*")
	tr = protowire.AppendTag(tr, 3, protowire.VarintType)
	tr = protowire.AppendVarint(tr, 1500)
	tr = protowire.AppendTag(tr, 4, protowire.VarintType)
	tr = protowire.AppendVarint(tr, 3)
	tr = protowire.AppendTag(tr, 5, protowire.Fixed64Type)
	tr = protowire.AppendFixed64(tr, math.Float64bits(0.25))
	build := func(mode uint64, extra ...byte) []byte {
		var tc []byte
		tc = protowire.AppendTag(tc, 1, protowire.VarintType)
		tc = protowire.AppendVarint(tc, mode)
		tc = protowire.AppendTag(tc, 2, protowire.BytesType)
		tc = protowire.AppendBytes(tc, tr)
		tc = protowire.AppendTag(tc, 3, protowire.VarintType)
		tc = protowire.AppendVarint(tc, 9000)
		tc = append(tc, extra...)
		out := traceConfig(60_000, false, "tracepipe.synthetic")
		out = protowire.AppendTag(out, 17, protowire.BytesType)
		return protowire.AppendBytes(out, tc)
	}
	for mode, want := range map[uint64]string{1: config.TriggerModeStart, 2: config.TriggerModeStop, 4: config.TriggerModeClone} {
		cfg, err := config.ConfigFromTraceConfig(build(mode))
		if err != nil {
			t.Fatalf("mode %d: %v", mode, err)
		}
		got := cfg.TriggerConfig
		wantSpec := config.TriggerSpec{Name: "t1", ProducerNameRegex: "perfetto_.*", StopDelay: 1500 * time.Millisecond, MaxPer24h: 3, SkipProbability: 0.25}
		wantTimeout, wantDuration := 9*time.Second, time.Minute
		if mode == 4 {
			// The timeout is the session's duration, as traced makes it.
			wantTimeout, wantDuration = 0, 9*time.Second
		}
		if got == nil || got.Mode != want || got.Timeout != wantTimeout || len(got.Triggers) != 1 || got.Triggers[0] != wantSpec {
			t.Fatalf("mode %d: %+v", mode, got)
		}
		if cfg.Duration != wantDuration {
			t.Fatalf("mode %d: duration %v, want %v", mode, cfg.Duration, wantDuration)
		}
	}
	// Unlike traced, STOP_TRACING with write_into_file is accepted
	// (docs/perfetto.md says so).
	if _, err := config.ConfigFromTraceConfig(withTriggerConfig(traceConfig(0, true, "tracepipe.synthetic"), 2, 1000, trig{"x", 0})); err != nil {
		t.Fatalf("STOP_TRACING with write_into_file: %v", err)
	}
	for _, tc := range []struct {
		cfg  []byte
		want string
	}{
		{build(7), "trigger_config.trigger_mode 7"},
		{build(2, 0x28, 0x01), "trigger_config.use_clone_snapshot_if_available"}, // field 5 = true
	} {
		if _, err := config.ConfigFromTraceConfig(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want an error naming %s", err, tc.want)
		}
	}
}

// CLONE_SNAPSHOT through the consumer port, as the perfetto command uses
// it: the consumer observes TYPE_CLONE_TRIGGER_HIT; a producer activates
// the trigger; the consumer is told the session and trigger, clones the
// session by that id and reads the clone; the session records on.
func TestPerfettoTriggerCloneSnapshot(t *testing.T) {
	prodSock, consSock, reg := perfettoService(t)
	const packets = 120
	pd := liveDouble(t, prodSock, reg, packets, false)
	a := dialConsumer(t, consSock)
	defer a.pd.close()
	tc := withTriggerConfig(traceConfig(600_000, false, "test.perfetto_double"), 4, 0, trig{"snap", 0})
	enable := a.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: tc}, false)
	pd.waitCommand("start_data_source")
	obs := a.pd.invoke("ObserveEvents", &ipc.ObserveEventsRequest{EventsToObserve: []uint32{uint32(ipc.ObservableEvents_TYPE_CLONE_TRIGGER_HIT)}}, false)
	// Requests on a connection are handled in order: once this Flush is
	// answered, the observation is in place, and the producer committed.
	var events []*ipc.ObservableEvents
	if r := a.replyWithEvents(a.pd.invoke("Flush", &ipc.FlushRequest{TimeoutMs: proto.Uint32(10_000)}, false), obs, &events); !r.GetSuccess() {
		t.Fatalf("Flush: %v", r)
	}
	triggerProducer(t, prodSock, "perfetto_cmd", "snap")
	var hit *ipc.ObservableEvents_CloneTriggerHit
	for hit == nil {
		f, _, err := a.pd.recv()
		if err != nil {
			t.Fatalf("waiting for TYPE_CLONE_TRIGGER_HIT: %v", err)
		}
		var er ipc.ObserveEventsResponse
		if f.GetRequestId() == obs && proto.Unmarshal(f.GetMsgInvokeMethodReply().GetReplyProto(), &er) == nil {
			hit = er.GetEvents().GetCloneTriggerHit()
		}
	}
	// Every field traced sets (tracing_service_endpoints_impl.cc,
	// NotifyCloneSnapshotTrigger): the producer's name and socket uid,
	// when, and the trigger's delay.
	if hit.GetTriggerName() != "snap" || hit.GetTracingSessionId() == 0 || hit.GetProducerName() != "perfetto_cmd" ||
		hit.ProducerUid == nil || hit.GetProducerUid() != uint32(os.Getuid()) || hit.GetBootTimeNs() == 0 || hit.TriggerDelayMs == nil {
		t.Fatalf("clone_trigger_hit %v", hit)
	}
	// The perfetto command clones with what the event said; the clone's
	// trigger packet names the producer.
	b := dialConsumer(t, consSock)
	defer b.pd.close()
	var cr ipc.CloneSessionResponse
	r := b.reply(b.pd.invoke("CloneSession", &ipc.CloneSessionRequest{Selector: &ipc.CloneSessionRequest_SessionId{SessionId: uint64(hit.GetTracingSessionId())},
		CloneTriggerName: proto.String(hit.GetTriggerName()), CloneTriggerProducerName: proto.String(hit.GetProducerName()),
		CloneTriggerTrustedProducerUid: proto.Int32(int32(hit.GetProducerUid())), CloneTriggerBootTimeNs: proto.Uint64(hit.GetBootTimeNs()),
		CloneTriggerDelayMs: proto.Uint64(hit.GetTriggerDelayMs())}, false))
	if proto.Unmarshal(r.GetReplyProto(), &cr) != nil || !cr.GetSuccess() {
		t.Fatalf("clone of session %d: %v", hit.GetTracingSessionId(), &cr)
	}
	clone := b.readAll()
	if got := countDoublePackets(t, clone); got != packets {
		t.Fatalf("%d of %d producer packets in the clone", got, packets)
	}
	var named bool
	for _, p := range clone {
		if info, err := tracefile.DecodePacket(p); err == nil && info.PayloadField == fieldCloneSnapshotTrigger {
			named = named || stringField(info.Payload, 2) == "perfetto_cmd"
		}
	}
	if !named {
		t.Fatal("the clone has no clone_snapshot_trigger packet naming the producer")
	}
	if pd.count("stop_data_source") != 0 {
		t.Fatal("the trigger stopped the session")
	}
	a.reply(a.pd.invoke("DisableTracing", &ipc.DisableTracingRequest{}, false))
	a.reply(enable)
	// As traced, the session itself is read only by cloning it: its
	// ReadBuffers returns nothing.
	if pkts := a.readAll(); len(pkts) != 0 {
		t.Fatalf("ReadBuffers of the CLONE_SNAPSHOT session returned %d packets, traced returns none", len(pkts))
	}
	// With write_into_file, traced refuses the config.
	d := dialConsumer(t, consSock)
	defer d.pd.close()
	r = d.reply(d.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: withTriggerConfig(traceConfig(600_000, true, "test.perfetto_double"), 4, 1000, trig{"snap", 0})}, false))
	var er ipc.EnableTracingResponse
	if err := proto.Unmarshal(r.GetReplyProto(), &er); err != nil || !strings.Contains(er.GetError(), "CLONE_SNAPSHOT with write_into_file") {
		t.Fatalf("CLONE_SNAPSHOT with write_into_file: %v %v", &er, err)
	}
}

// perfettoServiceLogging is perfettoService with the consumer port's
// warnings written to log.
func perfettoServiceLogging(t *testing.T, log *testsupport.LockedBuffer) (prodSock, consSock string, reg *perfetto.Producers) {
	t.Helper()
	dir := t.TempDir()
	prodSock, consSock = filepath.Join(dir, "p.sock"), filepath.Join(dir, "c.sock")
	reg = perfetto.NewProducers()
	prodHost := ipc.NewHost(ipc.NewProducerPort(reg))
	consHost := ipc.NewHost(ipc.NewConsumerPort(&PerfettoConsumers{Producers: reg, Logger: slog.New(slog.NewTextHandler(log, nil))}))
	for _, h := range []*ipc.Host{prodHost, consHost} {
		h.Logf = t.Logf
		t.Cleanup(func() { h.Close() })
	}
	if err := prodHost.Listen(prodSock); err != nil {
		t.Fatal(err)
	}
	if err := consHost.Listen(consSock); err != nil {
		t.Fatal(err)
	}
	return prodSock, consSock, reg
}

// perfettoCmdTrigger sends triggers exactly as the perfetto command does
// for `--trigger NAME` and for a config's activate_triggers
// (src/perfetto_cmd/trigger_producer.cc at the golden commit): it
// connects to the producer socket as "perfetto_cmd_producer", waits for
// InitializeConnection's reply, sends ActivateTriggers and exits without
// waiting for that reply.
func perfettoCmdTrigger(t *testing.T, sock string, names ...string) {
	t.Helper()
	pd := dialDouble(t, sock, 0)
	pd.rid++
	_ = pd.send(&ipc.Frame{RequestId: proto.Uint64(pd.rid), Msg: &ipc.Frame_MsgBindService{MsgBindService: &ipc.Frame_BindService{ServiceName: proto.String("ProducerPort")}}})
	f, _, err := pd.recv()
	if err != nil || !f.GetMsgBindServiceReply().GetSuccess() {
		t.Fatalf("bind: %v %v", f, err)
	}
	for _, m := range f.GetMsgBindServiceReply().GetMethods() {
		pd.methods[m.GetName()] = m.GetId()
	}
	rid := pd.invoke("InitializeConnection", &ipc.InitializeConnectionRequest{ProducerName: proto.String("perfetto_cmd_producer")}, false)
	if f, _, err := pd.recv(); err != nil || f.GetRequestId() != rid || !f.GetMsgInvokeMethodReply().GetSuccess() {
		t.Fatalf("InitializeConnection reply: %v %v", f, err)
	}
	pd.invoke("ActivateTriggers", &ipc.ActivateTriggersRequest{TriggerNames: names}, false)
	pd.close()
}

// triggerPacket is one trigger packet of a trace: name and producer
// (consumerTriggerPackets).
type triggerPacket struct{ name, producer string }

func consumerTriggerPackets(t *testing.T, pkts [][]byte) []triggerPacket {
	t.Helper()
	var out []triggerPacket
	for _, p := range pkts {
		info, err := tracefile.DecodePacket(p)
		if err != nil {
			t.Fatal(err)
		}
		if info.PayloadField == 46 {
			out = append(out, triggerPacket{stringField(info.Payload, 1), stringField(info.Payload, 2)})
		}
	}
	return out
}

// appendActivateTriggers appends TraceConfig.activate_triggers (18).
func appendActivateTriggers(tc []byte, names ...string) []byte {
	for _, n := range names {
		tc = protowire.AppendTag(tc, 18, protowire.BytesType)
		tc = protowire.AppendString(tc, n)
	}
	return tc
}

// TraceConfig.activate_triggers, as traced handles it at the golden
// commit: its service never reads the field (only perfetto_cmd does, and
// sends the names as a producer's ActivateTriggers instead of the
// config). So a consumer's EnableTracing carrying it gets an ordinary
// session, the names activate nothing, and the service's log says so by
// field name; the perfetto command's own path (perfetto_cmd_producer on
// the producer socket, gone right after sending) fires the trigger, and
// an unknown name beside it is ignored, as traced ignores it.
func TestPerfettoActivateTriggersInTraceConfig(t *testing.T) {
	var log testsupport.LockedBuffer
	prodSock, consSock, reg := perfettoServiceLogging(t, &log)
	const packets = 50
	pd := liveDouble(t, prodSock, reg, packets, false)
	a := dialConsumer(t, consSock)
	defer a.pd.close()
	enableA := a.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{
		TraceConfig: withTriggerConfig(traceConfig(600_000, false, "test.perfetto_double"), 2, 600_000, trig{"x", 0})}, false)
	pd.waitCommand("start_data_source")

	// A second consumer's session names "x" in activate_triggers: it runs
	// its 300 ms as any session and ends; "x" is not activated.
	b := dialConsumer(t, consSock)
	defer b.pd.close()
	tcB := appendActivateTriggers(traceConfig(300, false, "tracepipe.synthetic"), "x", "also-x")
	if r := b.reply(b.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: tcB}, false)); !r.GetSuccess() {
		t.Fatalf("EnableTracing with activate_triggers: %v", r)
	}
	if n := len(b.readAll()); n == 0 {
		t.Fatal("the session with activate_triggers recorded nothing")
	}
	if st := a.traceStats(); st.TracingSessions == 0 {
		t.Fatalf("session A after B's activate_triggers: %+v", st)
	}
	if pd.count("stop_data_source") != 0 {
		t.Fatal("activate_triggers in B's TraceConfig stopped session A")
	}
	w := log.String()
	if !strings.Contains(w, "trace_config.activate_triggers") || !strings.Contains(w, `\"x\"`) || !strings.Contains(w, "not activated") {
		t.Fatalf("the service's log does not name activate_triggers and its names:\n%s", w)
	}

	// The perfetto command's path acts: A stops, its trace holds the
	// producer's data and one trigger packet, from perfetto_cmd_producer.
	perfettoCmdTrigger(t, prodSock, "no-such-trigger", "x")
	if r := a.reply(enableA); !r.GetSuccess() {
		t.Fatalf("EnableTracing reply of A %v", r)
	}
	pkts := a.readAll()
	if got := countDoublePackets(t, pkts); got != packets {
		t.Fatalf("%d of %d producer packets", got, packets)
	}
	if got := consumerTriggerPackets(t, pkts); len(got) != 1 || got[0] != (triggerPacket{"x", "perfetto_cmd_producer"}) {
		t.Fatalf("trigger packets %+v, want one x from perfetto_cmd_producer", got)
	}
}

// A TraceConfig that only names triggers to activate (what perfetto_cmd
// reads before it drops the config) has no session to run: the error
// says why the names were not activated and what does activate them.
func TestPerfettoActivateTriggersOnlyConfig(t *testing.T) {
	_, err := config.ConfigFromTraceConfig(appendActivateTriggers(nil, "x"))
	if err == nil || !strings.Contains(err.Error(), "activate_triggers is not acted on") || !strings.Contains(err.Error(), "perfetto --trigger NAME") {
		t.Fatalf("%v, want an error explaining activate_triggers", err)
	}
	cfg, err := config.ConfigFromTraceConfig(appendActivateTriggers(traceConfig(1000, false, "tracepipe.synthetic"), "x"))
	if err != nil {
		t.Fatal(err)
	}
	if w := cfg.Warnings(); len(w) != 1 || !strings.HasPrefix(w[0], `activate_triggers: ["x"] not activated`) {
		t.Fatalf("warnings %q", w)
	}
}

// trigger_config.triggers[].producer_name_regex through the consumer
// port: a trigger from a producer the expression does not fully match
// does nothing; from one it matches (the perfetto command's producer
// name), the trigger acts.
func TestPerfettoTriggerProducerNameRegex(t *testing.T) {
	prodSock, consSock, reg := perfettoService(t)
	const packets = 40
	pd := liveDouble(t, prodSock, reg, packets, false)
	c := dialConsumer(t, consSock)
	defer c.pd.close()
	var tr, tcfg []byte
	tr = protowire.AppendTag(tr, 1, protowire.BytesType)
	tr = protowire.AppendString(tr, "x")
	tr = protowire.AppendTag(tr, 2, protowire.BytesType)
	tr = protowire.AppendString(tr, "perfetto_cmd_.*")
	tcfg = protowire.AppendTag(tcfg, 1, protowire.VarintType)
	tcfg = protowire.AppendVarint(tcfg, 2) // STOP_TRACING
	tcfg = protowire.AppendTag(tcfg, 2, protowire.BytesType)
	tcfg = protowire.AppendBytes(tcfg, tr)
	tcfg = protowire.AppendTag(tcfg, 3, protowire.VarintType)
	tcfg = protowire.AppendVarint(tcfg, 600_000)
	tc := traceConfig(600_000, false, "test.perfetto_double")
	tc = protowire.AppendTag(tc, 17, protowire.BytesType)
	tc = protowire.AppendBytes(tc, tcfg)
	enable := c.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: tc}, false)
	pd.waitCommand("start_data_source")
	// "a-perfetto_cmd_producer" contains a match but is not one.
	triggerProducer(t, prodSock, "a-perfetto_cmd_producer", "x")
	triggerProducer(t, prodSock, "other", "x")
	// Requests on one connection are handled in order, and the replies
	// above came after ActivateTriggers ran: the session is still live.
	if st := c.traceStats(); st.TracingSessions == 0 || pd.count("stop_data_source") != 0 {
		t.Fatalf("a trigger from a producer the regex does not match acted: %+v", st)
	}
	perfettoCmdTrigger(t, prodSock, "x")
	if r := c.reply(enable); !r.GetSuccess() {
		t.Fatalf("EnableTracing reply %v", r)
	}
	if got := consumerTriggerPackets(t, c.readAll()); len(got) != 1 || got[0] != (triggerPacket{"x", "perfetto_cmd_producer"}) {
		t.Fatalf("trigger packets %+v", got)
	}
}

// A CLONE_SNAPSHOT session as the perfetto command configures one for
// traced (trigger_timeout_ms and no duration_ms, which traced refuses
// beside a trigger_config) ends trigger_timeout_ms after it started: in
// traced the timeout becomes the session's duration. It ran forever here.
func TestPerfettoCloneSnapshotEndsAtTriggerTimeout(t *testing.T) {
	prodSock, consSock, reg := perfettoService(t)
	pd := liveDouble(t, prodSock, reg, 10, false)
	c := dialConsumer(t, consSock)
	defer c.pd.close()
	tc := withTriggerConfig(dropFieldNum(traceConfig(0, false, "test.perfetto_double"), 3), 4, 300, trig{"snap", 0})
	enable := c.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: tc}, false)
	pd.waitCommand("start_data_source")
	// c.reply gives up after 30 s: only the 300 ms timeout ends it.
	if r := c.reply(enable); !r.GetSuccess() {
		t.Fatalf("EnableTracing reply %v", r)
	}
	pd.waitCommand("stop_data_source")
}

// A STOP_TRACING session whose trigger never comes ends at
// trigger_timeout_ms with no data, as traced's: ReadBuffers returns
// nothing (tracing_service_impl.cc: a session waiting for a trigger is
// empty), although the producer wrote.
func TestPerfettoStopTracingTimeoutReturnsNothing(t *testing.T) {
	prodSock, consSock, reg := perfettoService(t)
	pd := liveDouble(t, prodSock, reg, 20, false)
	c := dialConsumer(t, consSock)
	defer c.pd.close()
	tc := withTriggerConfig(dropFieldNum(traceConfig(0, false, "test.perfetto_double"), 3), 2, 300, trig{"never", 0})
	enable := c.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: tc}, false)
	pd.waitCommand("start_data_source")
	if r := c.reply(enable); !r.GetSuccess() {
		t.Fatalf("EnableTracing reply %v", r)
	}
	if pkts := c.readAll(); len(pkts) != 0 {
		t.Fatalf("ReadBuffers returned %d packets (%d of the producer); traced returns none", len(pkts), countDoublePackets(t, pkts))
	}
}

// buffers[].transfer_on_clone from a consumer's TraceConfig, as traced:
// CloneSession moves the buffer into the clone and leaves the session an
// empty one, so a second clone holds none of the first's packets (a copy
// would hold them all again). clear_before_clone needs it, by name.
func TestPerfettoTransferOnClone(t *testing.T) {
	if _, err := config.ConfigFromTraceConfig(testsupport.Msg(1, testsupport.Msg(1, uint64(4096), 6, uint64(1)), 2, testsupport.Msg(1, testsupport.Msg(1, "tracepipe.synthetic")), 3, uint64(1000))); err == nil ||
		!strings.Contains(err.Error(), "buffers[0].clear_before_clone") {
		t.Fatalf("clear_before_clone without transfer_on_clone: %v", err)
	}
	prodSock, consSock, reg := perfettoService(t)
	const packets = 80
	liveDouble(t, prodSock, reg, packets, false)
	a := dialConsumer(t, consSock)
	defer a.pd.close()
	tc := testsupport.Msg(1, testsupport.Msg(1, uint64(4096), 5, uint64(1)), 2, testsupport.Msg(1, testsupport.Msg(1, "test.perfetto_double")), 3, uint64(600_000), 22, "moved")
	enable := a.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: tc}, false)
	if r := a.reply(a.pd.invoke("Flush", &ipc.FlushRequest{TimeoutMs: proto.Uint32(10_000)}, false)); !r.GetSuccess() {
		t.Fatalf("Flush: %v", r)
	}
	clone := func() int {
		b := dialConsumer(t, consSock)
		defer b.pd.close()
		var cr ipc.CloneSessionResponse
		r := b.reply(b.pd.invoke("CloneSession", &ipc.CloneSessionRequest{Selector: &ipc.CloneSessionRequest_UniqueSessionName{UniqueSessionName: "moved"}}, false))
		if proto.Unmarshal(r.GetReplyProto(), &cr) != nil || !cr.GetSuccess() {
			t.Fatalf("CloneSession: %v", &cr)
		}
		return countDoublePackets(t, b.readAll())
	}
	if got := clone(); got != packets {
		t.Fatalf("first clone: %d of %d producer packets", got, packets)
	}
	if got := clone(); got != 0 {
		t.Fatalf("second clone: %d producer packets; the first clone moved them", got)
	}
	a.reply(a.pd.invoke("DisableTracing", &ipc.DisableTracingRequest{}, false))
	a.reply(enable)
}
