package perfettosvc

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/transport/perfetto"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/pipeline"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	ipc "github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/smb"
	"github.com/tracepipe/tracepipe/tracefile"
)

// perfettoDouble is a Perfetto producer written from reference/ipc.md
// alone, from the client side: it binds ProducerPort, looks methods up by
// name, initialises, registers one data source, keeps GetAsyncCommand
// open, maps the SMB it is sent and writes packets into it with the SMB
// ABI, commits them, acknowledges flushes and reports start and stop.
type perfettoDouble struct {
	t       *testing.T
	uc      *net.UnixConn
	d       ipc.Deserializer
	rid     uint64
	methods map[string]uint32
	gacRID  uint64
	packets int

	mu       sync.Mutex
	commands []string // GetAsyncCommand commands in order
	smbFDs   int
	arb      *smb.Arbiter
	mem      *smb.SMB
	writer   *smb.TraceWriter
	instance uint64
	heldFDs  []int // received, not taken by a frame yet (recv)
	// lastConfig is the DataSourceConfig of the last setup_data_source.
	lastConfig []byte
	flushFlags []uint64 // each flush command's flags, in order
	// ignoreFlush: flush commands are noted and never acknowledged.
	ignoreFlush bool
}

func dialDouble(t *testing.T, path string, packets int) *perfettoDouble {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	return &perfettoDouble{t: t, uc: c.(*net.UnixConn), methods: map[string]uint32{}, packets: packets}
}

func (pd *perfettoDouble) send(f *ipc.Frame) error {
	b, err := ipc.AppendFrame(nil, f)
	if err != nil {
		return err
	}
	_, err = pd.uc.Write(b)
	return err
}

func (pd *perfettoDouble) invoke(method string, args proto.Message, drop bool) uint64 {
	b, _ := proto.Marshal(args)
	return pd.invokeRaw(method, b, drop)
}

func (pd *perfettoDouble) invokeRaw(method string, args []byte, drop bool) uint64 {
	pd.rid++
	if args == nil {
		args = []byte{}
	}
	_ = pd.send(&ipc.Frame{RequestId: proto.Uint64(pd.rid), Msg: &ipc.Frame_MsgInvokeMethod{MsgInvokeMethod: &ipc.Frame_InvokeMethod{
		ServiceId: proto.Uint32(1), MethodId: proto.Uint32(pd.methods[method]), ArgsProto: args, DropReply: proto.Bool(drop)}}})
	return pd.rid
}

// recv reads one frame and the descriptors that came for it. As in
// Perfetto's client, a descriptor waits for the frame that takes it: one
// read can bring a reply and, after it, the command that the descriptor
// came with (setup_tracing right after the RegisterDataSource reply, when
// a running session starts the producer at once), so once connect
// opened GetAsyncCommand, descriptors are handed only with its replies,
// or on an error (a replay that never calls connect gets them with the
// frame that ends their read, as before).
func (pd *perfettoDouble) recv() (*ipc.Frame, []int, error) {
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4*4))
	take := func() []int {
		fds := pd.heldFDs
		pd.heldFDs = nil
		return fds
	}
	for {
		if f, err := pd.d.Next(); f != nil || err != nil {
			if err != nil || pd.gacRID == 0 || f.GetRequestId() == pd.gacRID {
				return f, take(), err
			}
			return f, nil, nil
		}
		_ = pd.uc.SetReadDeadline(time.Now().Add(30 * time.Second))
		n, oobn, _, _, err := pd.uc.ReadMsgUnix(buf, oob)
		if oobn > 0 {
			msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
			for _, m := range msgs {
				got, _ := unix.ParseUnixRights(&m)
				pd.heldFDs = append(pd.heldFDs, got...)
			}
		}
		if n > 0 {
			if ferr := pd.d.Feed(buf[:n]); ferr != nil {
				return nil, take(), ferr
			}
		}
		if err != nil {
			return nil, take(), err
		}
	}
}

// connect performs the connection sequence of Perfetto's producer client.
func (pd *perfettoDouble) connect(name string, desc *ipc.DataSourceDescriptor) {
	t := pd.t
	pd.rid++
	_ = pd.send(&ipc.Frame{RequestId: proto.Uint64(pd.rid), Msg: &ipc.Frame_MsgBindService{MsgBindService: &ipc.Frame_BindService{ServiceName: proto.String("ProducerPort")}}})
	f, _, err := pd.recv()
	if err != nil || !f.GetMsgBindServiceReply().GetSuccess() {
		t.Fatalf("bind: %v %v", f, err)
	}
	for _, m := range f.GetMsgBindServiceReply().GetMethods() {
		pd.methods[m.GetName()] = m.GetId()
	}
	initRID := pd.invoke("InitializeConnection", &ipc.InitializeConnectionRequest{
		SharedMemoryPageSizeHintBytes: proto.Uint32(4096), SharedMemorySizeHintBytes: proto.Uint32(256 << 10),
		ProducerName: proto.String(name)}, false)
	pd.gacRID = pd.invoke("GetAsyncCommand", &ipc.GetAsyncCommandRequest{}, false)
	regRID := pd.invoke("RegisterDataSource", &ipc.RegisterDataSourceRequest{DataSourceDescriptor: desc}, false)
	for _, want := range []uint64{initRID, regRID} {
		f, _, err := pd.recv()
		if err != nil || f.GetRequestId() != want || !f.GetMsgInvokeMethodReply().GetSuccess() {
			t.Fatalf("reply to %d: %v %v", want, f, err)
		}
	}
}

// serve answers GetAsyncCommand commands until the connection ends.
func (pd *perfettoDouble) serve(done chan<- error) {
	for {
		f, fds, err := pd.recv()
		if err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			done <- nil
			return
		}
		if f.GetRequestId() != pd.gacRID {
			continue // replies to our CommitData
		}
		var cmd ipc.GetAsyncCommandResponse
		if err := proto.Unmarshal(f.GetMsgInvokeMethodReply().GetReplyProto(), &cmd); err != nil {
			done <- err
			return
		}
		if err := pd.handle(&cmd, fds); err != nil {
			done <- err
			return
		}
	}
}

func (pd *perfettoDouble) note(s string) {
	pd.mu.Lock()
	pd.commands = append(pd.commands, s)
	pd.mu.Unlock()
}

func (pd *perfettoDouble) commit(cd *smb.CommitData) {
	pd.invokeRaw("CommitData", cd.AppendMarshal(nil), true)
}

func (pd *perfettoDouble) handle(cmd *ipc.GetAsyncCommandResponse, fds []int) error {
	switch c := cmd.Cmd.(type) {
	case *ipc.GetAsyncCommandResponse_SetupTracing_:
		pd.note("setup_tracing")
		if len(fds) != 1 {
			return fmt.Errorf("setup_tracing with %d descriptors", len(fds))
		}
		pd.smbFDs++
		s, err := smb.MapFD(fds[0], int(c.SetupTracing.GetSharedBufferPageSizeKb())*1024)
		if err != nil {
			return err
		}
		pd.mem = s
		pd.arb, err = smb.NewArbiter(s, smb.ArbiterOptions{OnCommit: pd.commit})
		return err
	case *ipc.GetAsyncCommandResponse_SetupDataSource_:
		pd.note("setup_data_source " + c.SetupDataSource.GetConfig().GetName())
		raw, _ := proto.Marshal(c.SetupDataSource.GetConfig())
		pd.mu.Lock()
		pd.lastConfig = raw
		pd.mu.Unlock()
	case *ipc.GetAsyncCommandResponse_StartDataSource_:
		pd.note("start_data_source")
		pd.instance = c.StartDataSource.GetNewInstanceId()
		w, err := pd.arb.NewTraceWriter(c.StartDataSource.GetConfig().GetTargetBuffer(), smb.Stall)
		if err != nil {
			return err
		}
		pd.writer = w
		pd.invoke("RegisterTraceWriter", &ipc.RegisterTraceWriterRequest{TraceWriterId: proto.Uint32(uint32(w.ID())),
			TargetBuffer: c.StartDataSource.GetConfig().TargetBuffer}, true)
		for i := range pd.packets {
			var body [12]byte
			binary.LittleEndian.PutUint32(body[:], 0xd0b1e)
			binary.LittleEndian.PutUint32(body[4:], uint32(i))
			pkt := protowire.AppendTag(nil, tracefile.FieldForTesting, protowire.BytesType)
			pkt = protowire.AppendBytes(pkt, body[:])
			if err := w.WritePacket(pkt); err != nil {
				return err
			}
		}
		pd.invoke("NotifyDataSourceStarted", &ipc.NotifyDataSourceStartedRequest{DataSourceId: proto.Uint64(pd.instance)}, true)
	case *ipc.GetAsyncCommandResponse_Flush_:
		pd.note("flush")
		pd.mu.Lock()
		pd.flushFlags = append(pd.flushFlags, c.Flush.GetFlags())
		pd.mu.Unlock()
		if pd.ignoreFlush {
			return nil
		}
		if err := pd.writer.Flush(); err != nil {
			return err
		}
		pd.arb.SendFlushAck(c.Flush.GetRequestId())
	case *ipc.GetAsyncCommandResponse_StopDataSource_:
		pd.note("stop_data_source")
		_ = pd.writer.Close()
		pd.invoke("UnregisterTraceWriter", &ipc.UnregisterTraceWriterRequest{TraceWriterId: proto.Uint32(uint32(pd.writer.ID()))}, true)
		pd.invoke("NotifyDataSourceStopped", &ipc.NotifyDataSourceStoppedRequest{DataSourceId: proto.Uint64(c.StopDataSource.GetInstanceId())}, true)
	case *ipc.GetAsyncCommandResponse_ClearIncrementalState_:
		pd.note("clear_incremental_state")
	}
	return nil
}

func (pd *perfettoDouble) close() {
	pd.uc.Close()
	if pd.mem != nil {
		_ = pd.mem.Close()
	}
}

// A Perfetto producer speaking the wire protocol connects to tracepipe's
// producer socket, registers a data source a config names, and its
// packets reach the trace through the same SMB reader and buffers as any
// producer's, stamped with the identity of its socket.
func TestPerfettoProducerEndToEnd(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "producer.sock")
	reg := perfetto.NewProducers()
	host := ipc.NewHost(ipc.NewProducerPort(reg))
	host.Logf = t.Logf
	if err := host.Listen(sock); err != nil {
		t.Fatal(err)
	}
	defer host.Close()

	const packets = 500
	pd := dialDouble(t, sock, packets)
	defer pd.close()
	pd.connect("go-double", &ipc.DataSourceDescriptor{Name: proto.String("test.perfetto_double"),
		WillNotifyOnStart: proto.Bool(true), WillNotifyOnStop: proto.Bool(true)})
	served := make(chan error, 1)
	go pd.serve(served)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if missing := reg.WaitFor(ctx, []string{"test.perfetto_double"}); len(missing) > 0 {
		t.Fatalf("never registered: %v", missing)
	}
	out := filepath.Join(dir, "trace.pftrace")
	cfg := cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 300ms
buffers: [{size_kb: 4096}]
perfetto: {enabled: true}
data_sources:
  - name: test.perfetto_double
sinks: [{type: file, path: %q}]
`, out))
	s, err := pipeline.New(cfg, pipeline.Options{Logger: testsupport.Logger(t), Perfetto: reg})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pkts := tracetest.ReadTrace(t, out)
	seen := map[int]bool{}
	for _, p := range pkts {
		_, i, body, ok := tracetest.ScriptedID(p.Raw)
		if !ok || binary.LittleEndian.Uint32(body) != 0xd0b1e {
			continue
		}
		if !p.Info.HasTrustedUID || p.Info.TrustedUID != int32(os.Getuid()) || p.Info.TrustedPID != int32(os.Getpid()) || p.Info.SequenceID < 2 {
			t.Fatalf("packet %d: trusted uid %d pid %d seq %d", i, p.Info.TrustedUID, p.Info.TrustedPID, p.Info.SequenceID)
		}
		if seen[i] {
			t.Fatalf("packet %d twice", i)
		}
		seen[i] = true
	}
	if len(seen) != packets {
		t.Fatalf("%d of %d producer packets in the trace (stats %+v)", len(seen), packets, res.Stats)
	}
	// The packets came through commits, not only the end-of-session
	// scrape: the producer's flush acks completed the flushes.
	if res.Stats.FinalFlushOutcome != tracefile.FlushOutcomeSucceeded || res.Stats.FlushesFailed != 0 || res.Stats.FlushesSucceeded == 0 {
		t.Fatalf("flushes: final outcome %d, %d succeeded, %d failed", res.Stats.FinalFlushOutcome, res.Stats.FlushesSucceeded, res.Stats.FlushesFailed)
	}
	if tp := res.Stats.Tracepipe; tp != nil && tp.DataSourceErrors != 0 {
		t.Fatalf("%d data source errors", tp.DataSourceErrors)
	}
	pd.close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	pd.mu.Lock()
	cmds := pd.commands
	pd.mu.Unlock()
	want := []string{"setup_tracing", "setup_data_source test.perfetto_double", "start_data_source"}
	if len(cmds) < 5 || fmt.Sprint(cmds[:3]) != fmt.Sprint(want) || cmds[len(cmds)-1] != "stop_data_source" || cmds[len(cmds)-2] != "flush" || pd.smbFDs != 1 {
		t.Fatalf("commands %q, %d SMB descriptors", cmds, pd.smbFDs)
	}
}

// A Perfetto producer that disconnects mid-session is a dead data source:
// the session goes on and ends normally, what the producer committed
// before is in the trace, and the death is attributed to it.
func TestPerfettoProducerDisconnectMidSession(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "producer.sock")
	reg := perfetto.NewProducers()
	host := ipc.NewHost(ipc.NewProducerPort(reg))
	if err := host.Listen(sock); err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	const packets = 100
	pd := dialDouble(t, sock, packets)
	defer pd.close()
	pd.connect("quitter", &ipc.DataSourceDescriptor{Name: proto.String("test.perfetto_quitter"), WillNotifyOnStart: proto.Bool(true)})
	// Serve commands until started, then commit and hang up.
	go func() {
		for {
			f, fds, err := pd.recv()
			if err != nil {
				return
			}
			var cmd ipc.GetAsyncCommandResponse
			if f.GetRequestId() != pd.gacRID || proto.Unmarshal(f.GetMsgInvokeMethodReply().GetReplyProto(), &cmd) != nil {
				continue
			}
			if err := pd.handle(&cmd, fds); err != nil {
				t.Error(err)
				return
			}
			if cmd.GetStartDataSource() != nil {
				_ = pd.writer.Flush() // commits everything written
				pd.uc.Close()
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg.WaitFor(ctx, []string{"test.perfetto_quitter"})
	out := filepath.Join(dir, "trace.pftrace")
	cfg := cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 2s
buffers: [{size_kb: 1024}]
perfetto: {enabled: true}
data_sources: [{name: test.perfetto_quitter}]
sinks: [{type: file, path: %q}]
`, out))
	s, err := pipeline.New(cfg, pipeline.Options{Logger: testsupport.Logger(t), Perfetto: reg})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var raw [][]byte
	for _, p := range tracetest.ReadTrace(t, out) {
		raw = append(raw, p.Raw)
	}
	if got := countDoublePackets(t, raw); got != packets {
		t.Fatalf("%d of %d committed packets kept", got, packets)
	}
	tp := res.Stats.Tracepipe
	if tp == nil || len(tp.Producers) != 1 || tp.Producers[0].Died != 1 || !strings.Contains(tp.Producers[0].Error, "disconnected") {
		t.Fatalf("producer stats %+v", tp)
	}
}
