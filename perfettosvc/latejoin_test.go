package perfettosvc

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/pipeline"
	"github.com/tracepipe/tracepipe/transport/perfetto"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	ipc "github.com/tracepipe/tracepipe/perfettoipc"
)

// Late joiners: as traced, a producer that registers a data source while
// a session that names it records is started for that session (the
// everyday workflow: start perfetto, then the app).

// joinDouble connects a producer double named name serving
// test.perfetto_double with packets packets, and serves it until the
// test ends.
func joinDouble(t *testing.T, prodSock, name string, packets int, ignoreFlush bool) *perfettoDouble {
	t.Helper()
	pd := dialDouble(t, prodSock, packets)
	pd.ignoreFlush = ignoreFlush
	pd.connect(name, &ipc.DataSourceDescriptor{Name: proto.String("test.perfetto_double"),
		WillNotifyOnStart: proto.Bool(true), WillNotifyOnStop: proto.Bool(true)})
	served := make(chan error, 1)
	go pd.serve(served)
	t.Cleanup(func() {
		pd.close()
		if err := <-served; err != nil {
			t.Error(err)
		}
	})
	return pd
}

// waitStarted waits (bounded) until pd got start_data_source.
func waitStarted(t *testing.T, pd *perfettoDouble, name string) {
	t.Helper()
	testsupport.WaitUntil(t, name+" started", 30*time.Second, func() bool { return pd.count("start_data_source") > 0 })
}

// flushOK asks the consumer's session for a flush and fails the test
// unless it succeeded: the session is running.
func flushOK(t *testing.T, c *consumerClient) {
	t.Helper()
	if r := c.reply(c.pd.invoke("Flush", &ipc.FlushRequest{TimeoutMs: proto.Uint32(10_000)}, false)); !r.GetSuccess() {
		t.Fatalf("Flush: %v", r)
	}
}

// disableAndRead ends the consumer's session, waits for EnableTracing's
// reply and returns the trace read back.
func disableAndRead(t *testing.T, c *consumerClient, enable uint64) [][]byte {
	t.Helper()
	c.reply(c.pd.invoke("DisableTracing", &ipc.DisableTracingRequest{}, false))
	r := c.reply(enable)
	var er ipc.EnableTracingResponse
	if !r.GetSuccess() || proto.Unmarshal(r.GetReplyProto(), &er) != nil || er.Error != nil {
		t.Fatalf("EnableTracing reply %v (%v)", r, &er)
	}
	return c.readAll()
}

// numDataSources is num_data_sources of the one session QueryServiceState
// lists.
func numDataSources(t *testing.T, c *consumerClient) uint32 {
	t.Helper()
	r := c.reply(c.pd.invoke("QueryServiceState", &ipc.QueryServiceStateRequest{}, false))
	var resp ipc.QueryServiceStateResponse
	if !r.GetSuccess() || proto.Unmarshal(r.GetReplyProto(), &resp) != nil || len(resp.GetServiceState().GetTracingSessions()) != 1 {
		t.Fatalf("QueryServiceState reply %v (%v)", r, &resp)
	}
	return resp.GetServiceState().GetTracingSessions()[0].GetNumDataSources()
}

// (a) A producer that connects after EnableTracing is set up and started
// for the running session, and its packets are in the trace beside those
// of the producer that was there from the start.
func TestPerfettoLateProducerJoins(t *testing.T) {
	prodSock, consSock, _ := perfettoService(t)
	const na, nb = 120, 80
	a := joinDouble(t, prodSock, "double-a", na, false)
	c := dialConsumer(t, consSock)
	defer c.pd.close()
	enable := c.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: filteredConfig(60_000)}, false)
	waitStarted(t, a, "double-a")
	flushOK(t, c)

	b := joinDouble(t, prodSock, "double-b", nb, false)
	waitStarted(t, b, "double-b")
	if b.count("setup_data_source test.perfetto_double") != 1 {
		t.Fatalf("the late producer got %q", b.commands)
	}
	flushOK(t, c)
	if got := markerPackets(t, disableAndRead(t, c, enable)); got != na+nb {
		t.Fatalf("%d producer packets, want %d from double-a and %d from the late double-b", got, na, nb)
	}
	if a.count("start_data_source") != 1 || b.count("start_data_source") != 1 || b.count("stop_data_source") != 1 {
		t.Fatalf("a got %q, b got %q", a.commands, b.commands)
	}
}

// (b) A session whose only data source no producer serves yet runs, as
// traced's does (nearly empty), and a producer that connects during it
// is recorded.
func TestPerfettoSessionWaitsForItsProducer(t *testing.T) {
	prodSock, consSock, reg := perfettoService(t)
	const n = 90
	c := dialConsumer(t, consSock)
	defer c.pd.close()
	enable := c.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: filteredConfig(60_000)}, false)
	flushOK(t, c) // the session runs, with no instance of its data source

	if st := c.traceStats(); st.ProducersConnected != 0 {
		t.Fatalf("producers_connected %d before any producer connected", st.ProducersConnected)
	}
	// QueryServiceState lists the session with no data source instance
	// while it waits, and one once the producer joined (traced's
	// num_data_sources counts instances).
	if got := numDataSources(t, c); got != 0 {
		t.Fatalf("num_data_sources %d before any producer connected", got)
	}
	pd := joinDouble(t, prodSock, "double-late", n, false)
	waitStarted(t, pd, "double-late")
	if got := numDataSources(t, c); got != 1 {
		t.Fatalf("num_data_sources %d after the producer joined, want 1", got)
	}
	flushOK(t, c)
	if got := markerPackets(t, disableAndRead(t, c, enable)); got != n {
		t.Fatalf("%d producer packets, want the late producer's %d", got, n)
	}
	if len(reg.DataSources()) != 1 {
		t.Fatalf("registered %v", reg.DataSources())
	}
}

// (c) A late producer that the data source's producer_name_filter does
// not name is not started; one it names is.
func TestPerfettoLateProducerFiltered(t *testing.T) {
	prodSock, consSock, _ := perfettoService(t)
	const na, nx, na2 = 50, 70, 30
	a := joinDouble(t, prodSock, "double-a", na, false)
	c := dialConsumer(t, consSock)
	defer c.pd.close()
	enable := c.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: filteredConfig(60_000, "double-a", "double-a2")}, false)
	waitStarted(t, a, "double-a")

	x := joinDouble(t, prodSock, "double-x", nx, false)
	// double-x registered before double-a2 connected: the pass that
	// starts double-a2 has seen double-x too.
	a2 := joinDouble(t, prodSock, "double-a2", na2, false)
	waitStarted(t, a2, "double-a2")
	flushOK(t, c)
	if got := markerPackets(t, disableAndRead(t, c, enable)); got != na+na2 {
		t.Fatalf("%d producer packets, want %d + %d from the admitted producers", got, na, na2)
	}
	if x.count("setup_data_source test.perfetto_double") != 0 || x.count("start_data_source") != 0 {
		t.Fatalf("the filtered-out producer got %q", x.commands)
	}
}

// (d) A producer that registers while the session is stopping (its final
// flush is waiting on a producer that never acknowledges) is not started
// for it, and the session ends within its timeouts.
func TestPerfettoProducerRegisteringWhileStopping(t *testing.T) {
	prodSock, consSock, _ := perfettoService(t)
	a := joinDouble(t, prodSock, "double-a", 10, true) // never acknowledges a flush
	c := dialConsumer(t, consSock)
	defer c.pd.close()
	cfg := filteredConfig(60_000)
	cfg = protowire.AppendTag(cfg, 14, protowire.VarintType) // flush_timeout_ms
	cfg = protowire.AppendVarint(cfg, 1500)
	obs := c.pd.invoke("ObserveEvents", &ipc.ObserveEventsRequest{EventsToObserve: []uint32{2}}, false) // all_data_sources_started
	enable := c.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: cfg}, false)
	waitStarted(t, a, "double-a")
	// Only a data source the session counts started is flushed: double-a
	// having seen start_data_source is not enough (its
	// NotifyDataSourceStarted may still be on its way, and DisableTracing
	// would then flush nobody). A GetTraceStats round trip at a time until
	// the session says all started (bounded).
	var events []*ipc.ObservableEvents
	allStarted := func() bool {
		for _, ev := range events {
			if ev.GetAllDataSourcesStarted() {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(30 * time.Second); !allStarted(); {
		if time.Now().After(deadline) {
			t.Fatalf("the session never counted double-a started: events %v", events)
		}
		c.replyWithEvents(c.pd.invoke("GetTraceStats", &ipc.GetTraceStatsRequest{}, false), obs, &events)
	}

	c.pd.invoke("DisableTracing", &ipc.DisableTracingRequest{}, false)
	// The final flush reached double-a, which leaves it unanswered: the
	// session is stopping.
	testsupport.WaitUntil(t, "the final flush", 30*time.Second, func() bool { return a.count("flush") > 0 })
	b := joinDouble(t, prodSock, "double-b", 10, false)
	r := c.reply(enable) // bounded by the double's read deadline
	if !r.GetSuccess() {
		t.Fatalf("EnableTracing reply %v", r)
	}
	if b.count("setup_data_source test.perfetto_double") != 0 || b.count("start_data_source") != 0 {
		t.Fatalf("a producer that registered while the session stopped got %q", b.commands)
	}
	if a.count("stop_data_source") != 1 {
		t.Fatalf("double-a got %q", a.commands)
	}
}

// tracepipe run with a Perfetto data source (ListenForSession, then the
// session): it waits for a first producer as before, and a producer that
// connects after that wait joins the running session instead of being
// left out until the next one.
func TestRunSessionLateProducerJoins(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "producer.sock")
	out := filepath.Join(dir, "trace.pftrace")
	cfg := cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 60s
buffers: [{size_kb: 4096}]
perfetto: {enabled: true, producer_socket: %q, wait_for_producers: 30s}
data_sources:
  - name: test.perfetto_double
sinks: [{type: file, path: %q}]
`, sock, out))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type listened struct {
		reg  *perfetto.Producers
		host *ipc.Host
		err  error
	}
	lc := make(chan listened, 1)
	go func() {
		reg, host, err := perfetto.ListenForSession(ctx, cfg, testsupport.Logger(t))
		lc <- listened{reg, host, err}
	}()
	testsupport.WaitUntil(t, "the producer socket", 30*time.Second, func() bool { _, err := os.Stat(sock); return err == nil })
	const na, nb = 60, 40
	a := joinDouble(t, sock, "double-a", na, false)
	l := <-lc
	if l.err != nil {
		t.Fatal(l.err)
	}
	defer l.host.Close()
	s, err := pipeline.New(cfg, pipeline.Options{Logger: testsupport.Logger(t), Perfetto: l.reg})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	type ran struct {
		res *pipeline.Result
		err error
	}
	rc := make(chan ran, 1)
	go func() {
		res, err := s.Run(runCtx)
		rc <- ran{res, err}
	}()
	waitStarted(t, a, "double-a")
	b := joinDouble(t, sock, "double-b", nb, false)
	waitStarted(t, b, "double-b")
	stop()
	r := <-rc
	if r.err != nil {
		t.Fatal(r.err)
	}
	var raw [][]byte
	for _, p := range tracetest.ReadTrace(t, out) {
		raw = append(raw, p.Raw)
	}
	if got := markerPackets(t, raw); got != na+nb {
		t.Fatalf("%d producer packets, want %d from double-a and %d from the late double-b (stats %+v)", got, na, nb, r.res.Stats)
	}
	if b.count("stop_data_source") != 1 {
		t.Fatalf("the late producer got %q", b.commands)
	}
}

// Joiners are bounded: once the session made Options.MaxInstances data
// source instances, a producer that registers later is not started for
// it (its SMB is not mapped), the log says so, and the session ends as
// usual.
func TestLateJoinersBounded(t *testing.T) {
	prodSock, _, reg := perfettoService(t)
	out := filepath.Join(t.TempDir(), "trace.pftrace")
	cfg := cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 60s
buffers: [{size_kb: 4096}]
perfetto: {enabled: true}
data_sources:
  - name: test.perfetto_double
sinks: [{type: file, path: %q}]
`, out))
	const na, nb, nc = 20, 30, 40
	a := joinDouble(t, prodSock, "double-a", na, false)
	var log testsupport.LockedBuffer
	s, err := pipeline.New(cfg, pipeline.Options{Logger: slog.New(slog.NewTextHandler(&log, nil)), Perfetto: reg, MaxInstances: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithTimeout(context.Background(), 60*time.Second)
	defer stop()
	type ran struct {
		res *pipeline.Result
		err error
	}
	rc := make(chan ran, 1)
	go func() {
		res, err := s.Run(ctx)
		rc <- ran{res, err}
	}()
	waitStarted(t, a, "double-a")
	b := joinDouble(t, prodSock, "double-b", nb, false)
	waitStarted(t, b, "double-b")
	c := joinDouble(t, prodSock, "double-c", nc, false)
	testsupport.WaitUntil(t, "the refusal of double-c in the log", 30*time.Second, func() bool {
		return strings.Contains(log.String(), "the session has 2 data source instances, the most it takes")
	})
	if got := s.DataSourceInstances(); got != 2 {
		t.Fatalf("%d data source instances, want the bound, 2", got)
	}
	stop()
	r := <-rc
	if r.err != nil {
		t.Fatal(r.err)
	}
	var raw [][]byte
	for _, p := range tracetest.ReadTrace(t, out) {
		raw = append(raw, p.Raw)
	}
	if got := markerPackets(t, raw); got != na+nb {
		t.Fatalf("%d producer packets, want %d + %d from the two instances the bound allows", got, na, nb)
	}
	if c.count("setup_data_source test.perfetto_double") != 0 {
		t.Fatalf("a producer past the bound got %q", c.commands)
	}
}

// A producer that registers between EnableTracing with deferred_start and
// StartTracing is started with the session (the join pass runs before
// the session starts its data sources).
func TestPerfettoProducerJoinsBeforeDeferredStart(t *testing.T) {
	prodSock, consSock, _ := perfettoService(t)
	const n = 45
	c := dialConsumer(t, consSock)
	defer c.pd.close()
	tc := filteredConfig(60_000)
	tc = protowire.AppendTag(tc, 12, protowire.VarintType) // deferred_start
	tc = protowire.AppendVarint(tc, 1)
	enable := c.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: tc}, false)
	if got := numDataSources(t, c); got != 0 {
		t.Fatalf("num_data_sources %d before any producer connected", got)
	}
	pd := joinDouble(t, prodSock, "double-early", n, false)
	if r := c.reply(c.pd.invoke("StartTracing", &ipc.StartTracingRequest{}, false)); !r.GetSuccess() {
		t.Fatalf("StartTracing: %v", r)
	}
	waitStarted(t, pd, "double-early")
	flushOK(t, c)
	if got := markerPackets(t, disableAndRead(t, c, enable)); got != n {
		t.Fatalf("%d producer packets, want %d", got, n)
	}
	if pd.count("setup_data_source test.perfetto_double") != 1 {
		t.Fatalf("the producer got %q", pd.commands)
	}
}
