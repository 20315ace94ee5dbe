package perfettosvc

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/transport/perfetto"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	ipc "github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/tracefile"
)

// consumerClient is the perfetto command's side of the consumer socket,
// from reference/ipc.md: bind ConsumerPort, invoke by method name.
type consumerClient struct {
	pd *perfettoDouble // the same frame plumbing, on another socket
	// pending keeps replies that arrived while another was awaited, by
	// request id, in order: the service may answer requests in any order
	// (EnableTracing's reply can come before DisableTracing's, which
	// ended the session), so a reply read early must not be lost.
	pending map[uint64][]*ipc.Frame_InvokeMethodReply
}

func dialConsumer(t *testing.T, path string) *consumerClient {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	pd := &perfettoDouble{t: t, uc: c.(*net.UnixConn), methods: map[string]uint32{}}
	pd.rid++
	_ = pd.send(&ipc.Frame{RequestId: proto.Uint64(pd.rid), Msg: &ipc.Frame_MsgBindService{MsgBindService: &ipc.Frame_BindService{ServiceName: proto.String("ConsumerPort")}}})
	f, _, err := pd.recv()
	if err != nil || !f.GetMsgBindServiceReply().GetSuccess() {
		t.Fatalf("bind ConsumerPort: %v %v", f, err)
	}
	for _, m := range f.GetMsgBindServiceReply().GetMethods() {
		pd.methods[m.GetName()] = m.GetId()
	}
	return &consumerClient{pd: pd, pending: map[uint64][]*ipc.Frame_InvokeMethodReply{}}
}

// invokeFD is invoke with a descriptor on the frame (write_into_file).
func (c *consumerClient) invokeFD(method string, args proto.Message, fd int) uint64 {
	pd := c.pd
	b, _ := proto.Marshal(args)
	pd.rid++
	fr, _ := ipc.AppendFrame(nil, &ipc.Frame{RequestId: proto.Uint64(pd.rid), Msg: &ipc.Frame_MsgInvokeMethod{MsgInvokeMethod: &ipc.Frame_InvokeMethod{
		ServiceId: proto.Uint32(1), MethodId: proto.Uint32(pd.methods[method]), ArgsProto: b, DropReply: proto.Bool(false)}}})
	if _, _, err := pd.uc.WriteMsgUnix(fr, unix.UnixRights(fd), nil); err != nil {
		pd.t.Fatal(err)
	}
	return pd.rid
}

// reply waits for the reply (or the next stream reply) to rid.
func (c *consumerClient) reply(rid uint64) *ipc.Frame_InvokeMethodReply {
	c.pd.t.Helper()
	if q := c.pending[rid]; len(q) > 0 {
		c.pending[rid] = q[1:]
		return q[0]
	}
	for {
		f, _, err := c.pd.recv()
		if err != nil {
			c.pd.t.Fatalf("waiting for reply %d: %v", rid, err)
		}
		if f.GetRequestId() == rid {
			return f.GetMsgInvokeMethodReply()
		}
		c.stash(f)
	}
}

// stash keeps a reply to another request for its own reply call.
func (c *consumerClient) stash(f *ipc.Frame) {
	id := f.GetRequestId()
	c.pending[id] = append(c.pending[id], f.GetMsgInvokeMethodReply())
}

// traceConfig builds a TraceConfig: one buffer, the named data sources,
// duration, and what perfetto adds on the wire.
func traceConfig(durationMs uint64, writeIntoFile bool, names ...string) []byte {
	var b []byte
	buf := protowire.AppendTag(nil, 1, protowire.VarintType)
	buf = protowire.AppendVarint(buf, 4096)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, buf)
	for _, n := range names {
		dsc := protowire.AppendTag(nil, 1, protowire.BytesType)
		dsc = protowire.AppendString(dsc, n)
		// A data-source specific field the producer must receive as is.
		dsc = protowire.AppendTag(dsc, 1001, protowire.BytesType)
		dsc = protowire.AppendString(dsc, "for-the-producer")
		ds := protowire.AppendTag(nil, 1, protowire.BytesType)
		ds = protowire.AppendBytes(ds, dsc)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, ds)
	}
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, durationMs)
	if writeIntoFile {
		b = protowire.AppendTag(b, 8, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
		b = protowire.AppendTag(b, 9, protowire.VarintType)
		b = protowire.AppendVarint(b, 100)
	}
	b = protowire.AppendTag(b, 4, protowire.VarintType) // enable_extra_guardrails
	b = protowire.AppendVarint(b, 0)
	b = protowire.AppendTag(b, 27, protowire.VarintType) // trace_uuid_msb
	b = protowire.AppendVarint(b, 12345)
	return b
}

// perfettoService listens on a producer and a consumer socket.
func perfettoService(t *testing.T) (prodSock, consSock string, reg *perfetto.Producers) {
	t.Helper()
	reg = perfetto.NewProducers()
	prodSock, consSock = perfettoServiceFor(t, &PerfettoConsumers{Producers: reg, Logger: testsupport.Logger(t)})
	return prodSock, consSock, reg
}

// perfettoServiceFor is perfettoService for the consumers pc (and its
// Producers).
func perfettoServiceFor(t *testing.T, pc *PerfettoConsumers) (prodSock, consSock string) {
	t.Helper()
	dir := t.TempDir()
	prodSock, consSock = filepath.Join(dir, "p.sock"), filepath.Join(dir, "c.sock")
	// One host per socket, as traced: each socket's service has id 1.
	prodHost := ipc.NewHost(ipc.NewProducerPort(pc.Producers))
	consHost := ipc.NewHost(ipc.NewConsumerPort(pc))
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
	return prodSock, consSock
}

// countDoublePackets counts the double's packets (each once) in a
// sequence of TracePackets.
func countDoublePackets(t *testing.T, pkts [][]byte) int {
	t.Helper()
	seen := map[int]bool{}
	for _, p := range pkts {
		info, err := tracefile.DecodePacket(p)
		if err != nil {
			t.Fatal(err)
		}
		_, i, body, ok := tracetest.ScriptedID(p)
		if !ok || binary.LittleEndian.Uint32(body) != 0xd0b1e {
			continue
		}
		if info.TrustedPID != int32(os.Getpid()) || seen[i] {
			t.Fatalf("packet %d: trusted pid %d, seen before %v", i, info.TrustedPID, seen[i])
		}
		seen[i] = true
	}
	return len(seen)
}

// The perfetto command's sequence against tracepipe: EnableTracing with a
// TraceConfig, the reply when the session ends, ReadBuffers streamed in
// slices that rebuild into a trace with every producer packet.
func TestPerfettoConsumerReadBuffers(t *testing.T) {
	prodSock, consSock, reg := perfettoService(t)
	const packets = 3000 // several ReadBuffers replies
	pd := dialDouble(t, prodSock, packets)
	defer pd.close()
	pd.connect("go-double", &ipc.DataSourceDescriptor{Name: proto.String("test.perfetto_double"), WillNotifyOnStop: proto.Bool(true)})
	served := make(chan error, 1)
	go pd.serve(served)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if missing := reg.WaitFor(ctx, []string{"test.perfetto_double"}); len(missing) > 0 {
		t.Fatal(missing)
	}

	c := dialConsumer(t, consSock)
	defer c.pd.close()
	enable := c.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: traceConfig(300, false, "test.perfetto_double", "no.such.source")}, false)
	r := c.reply(enable)
	var er ipc.EnableTracingResponse
	if !r.GetSuccess() || proto.Unmarshal(r.GetReplyProto(), &er) != nil || !er.GetDisabled() || er.Error != nil {
		t.Fatalf("EnableTracing reply %v (%v)", r, &er)
	}
	read := c.pd.invoke("ReadBuffers", &ipc.ReadBuffersRequest{}, false)
	var pkts [][]byte
	var cur []byte
	replies := 0
	for {
		r := c.reply(read)
		replies++
		if !r.GetSuccess() || len(r.GetReplyProto()) > ipc.MaxFrameSize {
			t.Fatalf("ReadBuffers reply %d: success %v, %d bytes", replies, r.GetSuccess(), len(r.GetReplyProto()))
		}
		var rb ipc.ReadBuffersResponse
		if err := proto.Unmarshal(r.GetReplyProto(), &rb); err != nil {
			t.Fatal(err)
		}
		for _, s := range rb.GetSlices() {
			cur = append(cur, s.GetData()...)
			if s.GetLastSliceForPacket() {
				pkts = append(pkts, cur)
				cur = nil
			}
		}
		if !r.GetHasMore() {
			break
		}
	}
	if cur != nil || replies < 2 {
		t.Fatalf("%d replies, %d bytes of an unfinished packet", replies, len(cur))
	}
	if got := countDoublePackets(t, pkts); got != packets {
		t.Fatalf("%d of %d producer packets read back", got, packets)
	}
	// The trace has the service's packets too (TraceStats at the end).
	if _, ok, _ := tracefile.DecodeTraceStatsPacket(pkts[len(pkts)-1]); !ok {
		t.Fatal("the last packet is not TraceStats")
	}
	pd.mu.Lock()
	cmds := pd.commands
	pd.mu.Unlock()
	if len(cmds) < 3 || cmds[1] != "setup_data_source test.perfetto_double" {
		t.Fatalf("producer commands %q", cmds)
	}
	// The data-source specific part of the consumer's config reached the
	// producer.
	pd.mu.Lock()
	cfg := pd.lastConfig
	pd.mu.Unlock()
	if !bytes.Contains(cfg, []byte("for-the-producer")) {
		t.Fatalf("the producer got config %x without the consumer's field 1001", cfg)
	}
}

// write_into_file with the file descriptor passed on EnableTracing, as
// `perfetto -o FILE` does: the trace lands in that file.
func TestPerfettoConsumerWriteIntoPassedFile(t *testing.T) {
	prodSock, consSock, reg := perfettoService(t)
	const packets = 200
	pd := dialDouble(t, prodSock, packets)
	defer pd.close()
	pd.connect("go-double", &ipc.DataSourceDescriptor{Name: proto.String("test.perfetto_double")})
	served := make(chan error, 1)
	go pd.serve(served)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg.WaitFor(ctx, []string{"test.perfetto_double"})

	out := filepath.Join(t.TempDir(), "out.pftrace")
	f, err := os.OpenFile(out, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	c := dialConsumer(t, consSock)
	defer c.pd.close()
	enable := c.invokeFD("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: traceConfig(300, true, "test.perfetto_double")}, int(f.Fd()))
	f.Close()
	r := c.reply(enable)
	var er ipc.EnableTracingResponse
	if proto.Unmarshal(r.GetReplyProto(), &er) != nil || !er.GetDisabled() || er.Error != nil {
		t.Fatalf("EnableTracing reply %v", &er)
	}
	// ReadBuffers is refused while the session writes a file.
	if r := c.reply(c.pd.invoke("ReadBuffers", &ipc.ReadBuffersRequest{}, false)); r.Success != nil {
		t.Fatalf("ReadBuffers on a write_into_file session: %v", r)
	}
	var raw [][]byte
	for _, p := range tracetest.ReadTrace(t, out) {
		raw = append(raw, p.Raw)
	}
	if got := countDoublePackets(t, raw); got != packets {
		t.Fatalf("%d of %d producer packets in the file", got, packets)
	}
}

// Unsupported TraceConfig fields are refused by name in EnableTracing's
// reply; the session never starts.
func TestPerfettoConsumerRejectsUnsupportedFields(t *testing.T) {
	_, consSock, _ := perfettoService(t)
	c := dialConsumer(t, consSock)
	defer c.pd.close()
	tc := traceConfig(100, false)
	tc = protowire.AppendTag(tc, 5, protowire.VarintType) // lockdown_mode
	tc = protowire.AppendVarint(tc, 1)
	tc = protowire.AppendTag(tc, 29, protowire.BytesType) // output_path
	tc = protowire.AppendString(tc, "/etc/passwd")
	tc = protowire.AppendTag(tc, 999, protowire.VarintType)
	tc = protowire.AppendVarint(tc, 1)
	var er ipc.EnableTracingResponse
	r := c.reply(c.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: tc}, false))
	if proto.Unmarshal(r.GetReplyProto(), &er) != nil || !er.GetDisabled() {
		t.Fatalf("reply %v", r)
	}
	for _, want := range []string{"lockdown_mode", "output_path", "field 999"} {
		if !strings.Contains(er.GetError(), want) {
			t.Errorf("error %q does not name %s", er.GetError(), want)
		}
	}
}

// The perfetto command's own configs from the captures map (buffers,
// data sources with their specific config kept, duration, file mode).
func TestPerfettoGoldenTraceConfigsMap(t *testing.T) {
	root := testsupport.GoldenDir(t, "perfetto-ipc")
	for _, tc := range []struct {
		capture string
		ds      string
		file    bool
	}{{"a_probes", "linux.sys_stats", false}, {"b_track_event", "track_event", false}, {"c_probes_write_into_file", "linux.sys_stats", true}} {
		stream, err := os.ReadFile(filepath.Join(root, tc.capture, "consumer.conn1.c2s.frames.bin"))
		if err != nil {
			t.Fatal(err)
		}
		payloads, _, err := ipc.SplitFrames(stream)
		if err != nil {
			t.Fatal(err)
		}
		var f ipc.Frame
		var req ipc.EnableTracingRequest
		if proto.Unmarshal(payloads[1], &f) != nil || proto.Unmarshal(f.GetMsgInvokeMethod().GetArgsProto(), &req) != nil {
			t.Fatalf("%s: frame 1 is not EnableTracing", tc.capture)
		}
		cfg, err := config.ConfigFromTraceConfig(req.GetTraceConfig())
		if err != nil {
			t.Fatalf("%s: %v", tc.capture, err)
		}
		if len(cfg.Buffers) != 1 || cfg.Buffers[0].SizeKB != 4096 || cfg.Buffers[0].FillPolicy != config.FillPolicyDiscard ||
			len(cfg.DataSources) != 1 || cfg.DataSources[0].Name != tc.ds || len(cfg.DataSources[0].RawPerfettoConfig()) < 20 ||
			cfg.WriteIntoFile != tc.file || cfg.Duration == 0 {
			t.Fatalf("%s: mapped to %+v", tc.capture, cfg)
		}
	}
}

// QueryServiceState after traced_probes registered (capture d_query):
// the same producer and the same 19 data sources, in traced's order.
func TestPerfettoGoldenQueryServiceState(t *testing.T) {
	root := testsupport.GoldenDir(t, "perfetto-ipc", "d_query")
	prodSock, consSock, reg := perfettoService(t)
	stream, err := os.ReadFile(filepath.Join(root, "producer.conn1.c2s.frames.bin"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", prodSock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(stream); err != nil { // traced_probes' whole side, as it sent it
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if missing := reg.WaitFor(ctx, []string{"android.user_list"}); len(missing) > 0 {
		t.Fatal(missing)
	}
	golden, err := os.ReadFile(filepath.Join(root, "consumer.conn1.s2c.frames.bin"))
	if err != nil {
		t.Fatal(err)
	}
	payloads, _, err := ipc.SplitFrames(golden)
	if err != nil {
		t.Fatal(err)
	}
	var gf ipc.Frame
	var want ipc.QueryServiceStateResponse
	if proto.Unmarshal(payloads[1], &gf) != nil || proto.Unmarshal(gf.GetMsgInvokeMethodReply().GetReplyProto(), &want) != nil {
		t.Fatal("golden frame 1 is not the QueryServiceState reply")
	}
	// Bind: the same method table as traced's ConsumerPort.
	var bind ipc.Frame
	if proto.Unmarshal(payloads[0], &bind) != nil {
		t.Fatal("golden frame 0")
	}
	cc := dialConsumer(t, consSock)
	defer cc.pd.close()
	for _, m := range bind.GetMsgBindServiceReply().GetMethods() {
		if cc.pd.methods[m.GetName()] != m.GetId() {
			t.Fatalf("method %s: id %d, traced %d", m.GetName(), cc.pd.methods[m.GetName()], m.GetId())
		}
	}
	if len(cc.pd.methods) != len(bind.GetMsgBindServiceReply().GetMethods()) {
		t.Fatalf("%d methods, traced %d", len(cc.pd.methods), len(bind.GetMsgBindServiceReply().GetMethods()))
	}
	r := cc.reply(cc.pd.invoke("QueryServiceState", &ipc.QueryServiceStateRequest{SessionsOnly: proto.Bool(false)}, false))
	var got ipc.QueryServiceStateResponse
	if !r.GetSuccess() || r.GetHasMore() || proto.Unmarshal(r.GetReplyProto(), &got) != nil {
		t.Fatalf("reply %v", r)
	}
	// What legitimately differs: the pid (traced saw the proxy's), the uid
	// (the capture ran as root) and the service version string. Ours are
	// this process's, from the socket.
	for _, p := range got.GetServiceState().GetProducers() {
		if p.GetPid() != int32(os.Getpid()) || p.GetUid() != int32(os.Getuid()) {
			t.Fatalf("producer pid %d uid %d, want this process's", p.GetPid(), p.GetUid())
		}
	}
	for _, st := range []*ipc.TracingServiceState{got.GetServiceState(), want.GetServiceState()} {
		for _, p := range st.GetProducers() {
			p.Pid, p.Uid = nil, nil
		}
		st.TracingServiceVersion = nil
	}
	if !proto.Equal(&got, &want) {
		t.Fatalf("QueryServiceState:\n%v\ntraced:\n%v", &got, &want)
	}
}

// QueryServiceState lists a session only to a consumer that may clone it
// (its uid, or root), as traced; the session counts stay global. The
// peers are given to the backend directly: a test cannot connect as
// another uid, and the port's passing of the socket's peer is tested in
// perfettoipc (TestQueryServiceStateGetsThePeer).
func TestPerfettoQueryServiceStateByUID(t *testing.T) {
	pc := &PerfettoConsumers{Producers: perfetto.NewProducers(), Logger: testsupport.Logger(t)}
	deferred := func(name string) []byte {
		tc := traceConfig(60_000, false, "tracepipe.synthetic")
		tc = protowire.AppendTag(tc, 12, protowire.VarintType) // deferred_start: nothing runs
		tc = protowire.AppendVarint(tc, 1)
		tc = protowire.AppendTag(tc, 22, protowire.BytesType) // unique_session_name
		return protowire.AppendString(tc, name)
	}
	for _, s := range []struct {
		uid  uint32
		name string
	}{{1000, "alice"}, {2000, "bob"}} {
		sess, err := pc.EnableTracing(ipc.Peer{UID: s.uid, PID: 1}, deferred(s.name), -1)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sess.Disable(); <-sess.Done() })
	}
	for _, tc := range []struct {
		uid  uint32
		want string
	}{{1000, "alice"}, {2000, "bob"}, {3000, ""}, {0, "alice,bob"}} {
		st := pc.QueryServiceState(ipc.Peer{UID: tc.uid, PID: 2}, true)
		var names []string
		for _, s := range st.GetTracingSessions() {
			names = append(names, s.GetUniqueSessionName())
		}
		if got := strings.Join(names, ","); got != tc.want {
			t.Errorf("uid %d sees sessions %q, want %q", tc.uid, got, tc.want)
		}
		if st.GetNumSessions() != 2 {
			t.Errorf("uid %d: num_sessions %d, want 2 (every session counts)", tc.uid, st.GetNumSessions())
		}
	}
}
