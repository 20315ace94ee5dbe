package perfettosvc

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/transport/perfetto"

	"github.com/tracepipe/tracepipe/pipeline"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	ipc "github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/smb"
	"github.com/tracepipe/tracepipe/tracefile"
)

// multiDouble is a Perfetto producer (like traced_probes) that registers
// several data sources and serves every instance the service sets up, in
// any number of sessions, on its one connection and SMB: one trace writer
// per instance, into the instance's target buffer. Each packet says which
// instance wrote it (markerPacket).
type multiDouble struct {
	*perfettoDouble
	perInstance int

	mu       sync.Mutex
	cfgs     map[uint64]*ipc.DataSourceConfig // by instance id, from setup_data_source
	writers  map[uint64]*smb.TraceWriter
	flushes  [][]uint64 // each flush command's data_source_ids
	log      []string   // commands in order, "start 3", "stop 1", …
	setupFDs int
}

const sharedMagic = 0x5ea5ed

// sharedPacket is the packet instance writes as its i-th.
func sharedPacket(instance uint64, i int) []byte {
	var body [16]byte
	binary.LittleEndian.PutUint32(body[:], sharedMagic)
	binary.LittleEndian.PutUint64(body[4:], instance)
	binary.LittleEndian.PutUint32(body[12:], uint32(i))
	pkt := protowire.AppendTag(nil, tracefile.FieldForTesting, protowire.BytesType)
	return protowire.AppendBytes(pkt, body[:])
}

// parseShared returns the instance and index of a sharedPacket.
func parseShared(p []byte) (instance uint64, i int, ok bool) {
	for b := p; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, 0, false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return 0, 0, false
		}
		if num == tracefile.FieldForTesting && typ == protowire.BytesType {
			body, _ := protowire.ConsumeBytes(b[n:])
			if len(body) == 16 && binary.LittleEndian.Uint32(body) == sharedMagic {
				return binary.LittleEndian.Uint64(body[4:]), int(binary.LittleEndian.Uint32(body[12:])), true
			}
		}
		b = b[n+m:]
	}
	return 0, 0, false
}

func dialMulti(t *testing.T, sock string, perInstance int, names ...string) *multiDouble {
	t.Helper()
	md := &multiDouble{perfettoDouble: dialDouble(t, sock, 0), perInstance: perInstance,
		cfgs: map[uint64]*ipc.DataSourceConfig{}, writers: map[uint64]*smb.TraceWriter{}}
	desc := func(n string) *ipc.DataSourceDescriptor {
		return &ipc.DataSourceDescriptor{Name: proto.String(n), WillNotifyOnStart: proto.Bool(true), WillNotifyOnStop: proto.Bool(true)}
	}
	md.connect("multi-double", desc(names[0]))
	for _, n := range names[1:] {
		rid := md.invoke("RegisterDataSource", &ipc.RegisterDataSourceRequest{DataSourceDescriptor: desc(n)}, false)
		if f, _, err := md.recv(); err != nil || f.GetRequestId() != rid || !f.GetMsgInvokeMethodReply().GetSuccess() {
			t.Fatalf("RegisterDataSource %s: %v %v", n, f, err)
		}
	}
	return md
}

// serve answers commands until the connection ends.
func (md *multiDouble) serve(done chan<- error) {
	for {
		f, fds, err := md.recv()
		if err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			done <- nil
			return
		}
		if f.GetRequestId() != md.gacRID {
			continue
		}
		var cmd ipc.GetAsyncCommandResponse
		if err := proto.Unmarshal(f.GetMsgInvokeMethodReply().GetReplyProto(), &cmd); err != nil {
			done <- err
			return
		}
		if err := md.handleMulti(&cmd, fds); err != nil {
			done <- err
			return
		}
	}
}

func (md *multiDouble) logf(format string, args ...any) {
	md.mu.Lock()
	md.log = append(md.log, fmt.Sprintf(format, args...))
	md.mu.Unlock()
}

func (md *multiDouble) handleMulti(cmd *ipc.GetAsyncCommandResponse, fds []int) error {
	switch c := cmd.Cmd.(type) {
	case *ipc.GetAsyncCommandResponse_SetupTracing_:
		md.mu.Lock()
		md.setupFDs++
		md.mu.Unlock()
		return md.handle(cmd, fds) // maps the SMB, makes the arbiter
	case *ipc.GetAsyncCommandResponse_SetupDataSource_:
		id := c.SetupDataSource.GetNewInstanceId()
		md.logf("setup %d", id)
		md.mu.Lock()
		md.cfgs[id] = c.SetupDataSource.GetConfig()
		md.mu.Unlock()
	case *ipc.GetAsyncCommandResponse_StartDataSource_:
		id := c.StartDataSource.GetNewInstanceId()
		md.logf("start %d", id)
		target := c.StartDataSource.GetConfig().GetTargetBuffer()
		w, err := md.arb.NewTraceWriter(target, smb.Stall)
		if err != nil {
			return err
		}
		md.mu.Lock()
		md.writers[id] = w
		md.mu.Unlock()
		md.invoke("RegisterTraceWriter", &ipc.RegisterTraceWriterRequest{TraceWriterId: proto.Uint32(uint32(w.ID())), TargetBuffer: proto.Uint32(target)}, true)
		for i := range md.perInstance {
			if err := w.WritePacket(sharedPacket(id, i)); err != nil {
				return err
			}
		}
		md.invoke("NotifyDataSourceStarted", &ipc.NotifyDataSourceStartedRequest{DataSourceId: proto.Uint64(id)}, true)
	case *ipc.GetAsyncCommandResponse_Flush_:
		ids := c.Flush.GetDataSourceIds()
		md.mu.Lock()
		md.flushes = append(md.flushes, slices.Clone(ids))
		var ws []*smb.TraceWriter
		for _, id := range ids {
			if w := md.writers[id]; w != nil {
				ws = append(ws, w)
			}
		}
		md.mu.Unlock()
		for _, w := range ws {
			if err := w.Flush(); err != nil {
				return err
			}
		}
		md.arb.SendFlushAck(c.Flush.GetRequestId())
	case *ipc.GetAsyncCommandResponse_StopDataSource_:
		id := c.StopDataSource.GetInstanceId()
		md.logf("stop %d", id)
		md.mu.Lock()
		w := md.writers[id]
		delete(md.writers, id)
		md.mu.Unlock()
		if w != nil {
			_ = w.Close()
			md.invoke("UnregisterTraceWriter", &ipc.UnregisterTraceWriterRequest{TraceWriterId: proto.Uint32(uint32(w.ID()))}, true)
		}
		md.invoke("NotifyDataSourceStopped", &ipc.NotifyDataSourceStoppedRequest{DataSourceId: proto.Uint64(id)}, true)
	}
	return nil
}

// waitLog waits until the double's command log has n entries with prefix.
func (md *multiDouble) waitLog(t *testing.T, prefix string, n int) {
	t.Helper()
	seen := func() bool {
		md.mu.Lock()
		defer md.mu.Unlock()
		got := 0
		for _, l := range md.log {
			if len(l) >= len(prefix) && l[:len(prefix)] == prefix {
				got++
			}
		}
		return got >= n
	}
	if !testsupport.WaitFor(30*time.Second, seen) {
		md.mu.Lock()
		defer md.mu.Unlock()
		t.Fatalf("the producer never saw %d %q commands: %q", n, prefix, md.log)
	}
}

// One Perfetto producer serving three data sources in one session (two
// buffers) and two of them in a second session running at the same time:
// every instance's packets reach exactly its own session's file, on a
// sequence of the buffer its config names, none twice, none lost; each
// session's flushes list only its own instances, all of them at once;
// the stats count the producer as traced does.
func TestPerfettoProducerSharedAcrossInstancesAndSessions(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "producer.sock")
	reg := perfetto.NewProducers()
	host := ipc.NewHost(ipc.NewProducerPort(reg))
	host.Logf = t.Logf
	if err := host.Listen(sock); err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	const per = 300
	md := dialMulti(t, sock, per, "test.a", "test.b", "test.c")
	defer md.close()
	served := make(chan error, 1)
	go md.serve(served)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if missing := reg.WaitFor(ctx, []string{"test.a", "test.b", "test.c"}); len(missing) > 0 {
		t.Fatalf("never registered: %v", missing)
	}

	outA, outB := filepath.Join(dir, "a.pftrace"), filepath.Join(dir, "b.pftrace")
	// Session A runs until cancelled; B runs inside it.
	svcA, err := pipeline.New(cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 0s
flush_period: 200ms
buffers: [{size_kb: 1024}, {size_kb: 1024}]
perfetto: {enabled: true}
data_sources:
  - {name: test.a, target_buffer: 0}
  - {name: test.b, target_buffer: 1}
  - {name: test.c, target_buffer: 0}
sinks: [{type: file, path: %q}]
`, outA)), pipeline.Options{Logger: testsupport.Logger(t), Perfetto: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctxA, stopA := context.WithCancel(ctx)
	defer stopA()
	type ran struct {
		res *pipeline.Result
		err error
	}
	doneA := make(chan ran, 1)
	go func() { r, err := svcA.Run(ctxA); doneA <- ran{r, err} }()
	md.waitLog(t, "start", 3)

	svcB, err := pipeline.New(cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 300ms
buffers: [{size_kb: 512}]
perfetto: {enabled: true}
data_sources:
  - {name: test.c}
  - {name: test.a}
sinks: [{type: file, path: %q}]
`, outB)), pipeline.Options{Logger: testsupport.Logger(t), Perfetto: reg})
	if err != nil {
		t.Fatal(err)
	}
	resB, err := svcB.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md.waitLog(t, "stop", 2)
	stopA()
	ra := <-doneA
	if ra.err != nil {
		t.Fatal(ra.err)
	}
	resA := ra.res

	md.mu.Lock()
	cfgs := md.cfgs
	flushes := md.flushes
	log := md.log
	setupFDs := md.setupFDs
	md.mu.Unlock()
	if setupFDs != 1 {
		t.Fatalf("%d setup_tracing commands: the producer's one SMB goes out once", setupFDs)
	}
	want := "setup 1 setup 2 setup 3 start 1 start 2 start 3 setup 4 setup 5 start 4 start 5"
	if got := fmt.Sprint(log[:10]); got != "["+want+"]" {
		t.Fatalf("commands %q, want %s first", log, want)
	}
	// Instances 1-3 are A's (config order), 4-5 B's: one session id and
	// distinct global buffers per session.
	session := func(id uint64) uint64 { return cfgs[id].GetTracingSessionId() }
	if session(1) != session(2) || session(2) != session(3) || session(4) != session(5) || session(1) == session(4) {
		t.Fatalf("tracing_session_ids %d %d %d / %d %d", session(1), session(2), session(3), session(4), session(5))
	}
	tb := func(id uint64) uint32 { return cfgs[id].GetTargetBuffer() }
	if tb(1) != tb(3) || tb(1) == tb(2) || tb(4) != tb(5) || tb(4) == tb(1) || tb(4) == tb(2) {
		t.Fatalf("target buffers %d %d %d / %d %d", tb(1), tb(2), tb(3), tb(4), tb(5))
	}
	for _, f := range flushes {
		switch {
		case slices.Equal(f, []uint64{1, 2, 3}), slices.Equal(f, []uint64{4, 5}):
		default:
			t.Fatalf("flush of instances %v: a flush lists every instance of one session", f)
		}
	}

	check := func(name, path string, res *pipeline.Result, instances map[uint64]int) {
		t.Helper()
		// The buffer of each sequence, from the file's writer stats.
		seqBuf := map[uint32]uint32{}
		for _, w := range res.Stats.WriterStats {
			seqBuf[uint32(w.SequenceID)] = w.Buffer
		}
		seqOf := map[uint64]uint32{}
		seen := map[[2]uint64]bool{}
		count := map[uint64]int{}
		for _, p := range tracetest.ReadTrace(t, path) {
			id, i, ok := parseShared(p.Raw)
			if !ok {
				continue
			}
			wantBuf, mine := instances[id]
			if !mine {
				t.Fatalf("%s: packet %d of instance %d (session %d), not this session's", name, i, id, session(id))
			}
			if s, ok := seqOf[id]; ok && s != p.Info.SequenceID {
				t.Fatalf("%s: instance %d on sequences %d and %d", name, id, s, p.Info.SequenceID)
			}
			seqOf[id] = p.Info.SequenceID
			if b, ok := seqBuf[p.Info.SequenceID]; !ok || int(b) != wantBuf {
				t.Fatalf("%s: instance %d's packets on sequence %d of buffer %d (known %v), want buffer %d", name, id, p.Info.SequenceID, b, ok, wantBuf)
			}
			k := [2]uint64{id, uint64(i)}
			if seen[k] {
				t.Fatalf("%s: packet %d of instance %d twice", name, i, id)
			}
			seen[k] = true
			count[id]++
		}
		for id := range instances {
			if count[id] != per {
				t.Fatalf("%s: %d of %d packets of instance %d (counts %v)", name, count[id], per, id, count)
			}
		}
		st := res.Stats
		if st.ProducersConnected != 1 || st.ProducersSeen != 1 || st.DataSourcesRegistered != 3 || st.DataSourcesSeen != 5 {
			t.Fatalf("%s: producers connected %d seen %d, data sources registered %d seen %d; want 1 1 3 5 as traced counts",
				name, st.ProducersConnected, st.ProducersSeen, st.DataSourcesRegistered, st.DataSourcesSeen)
		}
		if st.FlushesFailed != 0 || st.FinalFlushOutcome != tracefile.FlushOutcomeSucceeded {
			t.Fatalf("%s: %d flushes failed, final outcome %d", name, st.FlushesFailed, st.FinalFlushOutcome)
		}
	}
	check("session A", outA, resA, map[uint64]int{1: 0, 2: 1, 3: 0})
	check("session B", outB, resB, map[uint64]int{4: 0, 5: 0})
	if n := reg.ChunksUnrouted.Load(); n != 0 {
		t.Fatalf("%d chunks unrouted", n)
	}
	md.close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}
