package perfetto

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/pipeline"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	ipc "github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/smb"
	"github.com/tracepipe/tracepipe/tracefile"
)

// The producer path as Perfetto's C SDK drives it (issue 27 items 2, 3): a
// producer process connects to the producer socket, gets an SMB, and its
// writer threads write track_event-sized packets as fast as they can under
// the Drop policy (the SDK's default), committing each chunk; the service
// streams into a file. The producer is a child process (the test binary
// re-executed), so that the benchmark process's CPU time is the service's
// alone and the producer reports its own.

// benchProducerEnv makes the test binary a benchmark producer (TestMain).
const benchProducerEnv = "TPPIPE_BENCH_PRODUCER"

type benchProducerArgs struct {
	Socket  string
	Writers int
	Size    int // bytes per packet
	// Posted commits as Perfetto's SDK does (smb.CommitPosted): the first
	// returned chunk wakes an IPC goroutine, which sends every chunk
	// returned by then in one CommitData. Otherwise each chunk is
	// committed on its own, from the writer (smb.CommitEachChunk).
	Posted bool
}

// benchProducerReport is what the producer prints when its connection ends.
type benchProducerReport struct {
	Attempted, Dropped uint64 // packets written / lost in the SMB (Drop policy)
	Flushes            uint64
	CPU                float64 // user + system seconds of the producer
}

// startBenchProducer starts the producer side in a child process (this
// test binary again); its report arrives on the returned builder once it
// exits.
func startBenchProducer(tb testing.TB, a benchProducerArgs) (*exec.Cmd, *strings.Builder) {
	tb.Helper()
	arg, _ := json.Marshal(a)
	child := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	child.Env = append(os.Environ(), benchProducerEnv+"="+string(arg))
	stdout := new(strings.Builder)
	child.Stdout, child.Stderr = stdout, os.Stderr
	if err := child.Start(); err != nil {
		tb.Fatal(err)
	}
	return child, stdout
}

// benchProducer runs the producer side; it returns the exit code.
func benchProducer(arg string) int {
	var a benchProducerArgs
	if err := json.Unmarshal([]byte(arg), &a); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	p, err := dialBenchProducer(a)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench producer:", err)
		return 1
	}
	err = p.serve()
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	r := benchProducerReport{Attempted: p.attempted.Load(), Flushes: p.flushes.Load(),
		CPU: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()}
	for _, w := range p.writers {
		r.Dropped += w.Stats().PacketsDropped
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench producer:", err)
		return 1
	}
	return 0
}

// benchProd is a minimal thread-safe Perfetto producer (the wire protocol
// as perfettoDouble speaks it), with writer goroutines of its own.
type benchProd struct {
	args    benchProducerArgs
	uc      *net.UnixConn
	d       ipc.Deserializer
	methods map[string]uint32
	fds     []int // received, not yet taken by a command

	sendMu sync.Mutex // invocations come from the writers (commits) and serve
	rid    uint64
	gacRID uint64

	mem     *smb.SMB
	arb     *smb.Arbiter
	writers []*smb.TraceWriter
	stop    atomic.Bool
	wg      sync.WaitGroup

	flushGen  atomic.Uint64 // bumped by each flush request
	flushID   atomic.Uint64 // its request id
	flushLeft atomic.Int64  // writers yet to flush for flushGen
	flushes   atomic.Uint64
	attempted atomic.Uint64
}

func dialBenchProducer(a benchProducerArgs) (*benchProd, error) {
	c, err := net.Dial("unix", a.Socket)
	if err != nil {
		return nil, err
	}
	p := &benchProd{args: a, uc: c.(*net.UnixConn), methods: map[string]uint32{}}
	p.rid++
	if err := p.send(&ipc.Frame{RequestId: proto.Uint64(p.rid), Msg: &ipc.Frame_MsgBindService{MsgBindService: &ipc.Frame_BindService{ServiceName: proto.String("ProducerPort")}}}); err != nil {
		return nil, err
	}
	f, _, err := p.recv()
	if err != nil || !f.GetMsgBindServiceReply().GetSuccess() {
		return nil, fmt.Errorf("bind: %v %v", f, err)
	}
	for _, m := range f.GetMsgBindServiceReply().GetMethods() {
		p.methods[m.GetName()] = m.GetId()
	}
	p.invoke("InitializeConnection", &ipc.InitializeConnectionRequest{
		SharedMemoryPageSizeHintBytes: proto.Uint32(4096), SharedMemorySizeHintBytes: proto.Uint32(256 << 10),
		ProducerName: proto.String("bench")}, false)
	p.gacRID = p.invoke("GetAsyncCommand", &ipc.GetAsyncCommandRequest{}, false)
	p.invoke("RegisterDataSource", &ipc.RegisterDataSourceRequest{DataSourceDescriptor: &ipc.DataSourceDescriptor{
		Name: proto.String("bench.producer"), WillNotifyOnStop: proto.Bool(true)}}, false)
	return p, nil
}

func (p *benchProd) send(f *ipc.Frame) error {
	b, err := ipc.AppendFrame(nil, f)
	if err != nil {
		return err
	}
	_, err = p.uc.Write(b)
	return err
}

func (p *benchProd) invoke(method string, args proto.Message, drop bool) uint64 {
	b, _ := proto.Marshal(args)
	return p.invokeRaw(method, b, drop)
}

func (p *benchProd) invokeRaw(method string, args []byte, drop bool) uint64 {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	p.rid++
	_ = p.send(&ipc.Frame{RequestId: proto.Uint64(p.rid), Msg: &ipc.Frame_MsgInvokeMethod{MsgInvokeMethod: &ipc.Frame_InvokeMethod{
		ServiceId: proto.Uint32(1), MethodId: proto.Uint32(p.methods[method]), ArgsProto: args, DropReply: proto.Bool(drop)}}})
	return p.rid
}

// recv reads one frame. Descriptors are kept in p.fds until a command
// takes them: one read may carry a descriptor and the end of an earlier
// frame.
func (p *benchProd) recv() (*ipc.Frame, []int, error) {
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		if f, err := p.d.Next(); f != nil || err != nil {
			fds := p.fds
			if f.GetRequestId() == p.gacRID || err != nil {
				p.fds = nil // a command takes what came before it
			} else {
				fds = nil
			}
			return f, fds, err
		}
		_ = p.uc.SetReadDeadline(time.Now().Add(2 * time.Minute))
		n, oobn, _, _, err := p.uc.ReadMsgUnix(buf, oob)
		if oobn > 0 {
			msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
			for _, m := range msgs {
				got, _ := unix.ParseUnixRights(&m)
				p.fds = append(p.fds, got...)
			}
		}
		if n > 0 {
			if ferr := p.d.Feed(buf[:n]); ferr != nil {
				return nil, nil, ferr
			}
		}
		if err != nil {
			return nil, nil, err
		}
	}
}

// serve answers commands until the service closes the connection.
func (p *benchProd) serve() error {
	for {
		f, fds, err := p.recv()
		if err != nil {
			p.stop.Store(true)
			p.wg.Wait()
			return nil
		}
		if f.GetRequestId() != p.gacRID {
			continue
		}
		var cmd ipc.GetAsyncCommandResponse
		if err := proto.Unmarshal(f.GetMsgInvokeMethodReply().GetReplyProto(), &cmd); err != nil {
			return err
		}
		if err := p.handle(&cmd, fds); err != nil {
			return err
		}
	}
}

func (p *benchProd) handle(cmd *ipc.GetAsyncCommandResponse, fds []int) error {
	switch c := cmd.Cmd.(type) {
	case *ipc.GetAsyncCommandResponse_SetupTracing_:
		if len(fds) != 1 {
			return fmt.Errorf("setup_tracing with %d descriptors", len(fds))
		}
		s, err := smb.MapFD(fds[0], int(c.SetupTracing.GetSharedBufferPageSizeKb())*1024)
		if err != nil {
			return err
		}
		p.mem = s
		opts := smb.ArbiterOptions{OnCommit: func(cd *smb.CommitData) {
			p.invokeRaw("CommitData", cd.AppendMarshal(nil), true)
		}}
		if p.args.Posted {
			// The SDK's IPC thread: it runs the posted flush task.
			kick := make(chan struct{}, 1)
			opts.Commit = smb.CommitPosted
			opts.OnPending = func() {
				select {
				case kick <- struct{}{}:
				default:
				}
			}
			go func() {
				for range kick {
					p.arb.FlushPendingCommits()
				}
			}()
		}
		p.arb, err = smb.NewArbiter(s, opts)
		return err
	case *ipc.GetAsyncCommandResponse_StartDataSource_:
		target := c.StartDataSource.GetConfig().GetTargetBuffer()
		for range p.args.Writers {
			w, err := p.arb.NewTraceWriter(target, smb.Drop)
			if err != nil {
				return err
			}
			p.invoke("RegisterTraceWriter", &ipc.RegisterTraceWriterRequest{TraceWriterId: proto.Uint32(uint32(w.ID())),
				TargetBuffer: proto.Uint32(target)}, true)
			p.writers = append(p.writers, w)
		}
		for _, w := range p.writers {
			p.wg.Add(1)
			go p.write(w)
		}
	case *ipc.GetAsyncCommandResponse_Flush_:
		// As the SDK does: each writer thread flushes its writer; the
		// last one acknowledges.
		p.flushes.Add(1)
		p.flushID.Store(c.Flush.GetRequestId())
		p.flushLeft.Store(int64(len(p.writers)))
		p.flushGen.Add(1)
		if len(p.writers) == 0 {
			p.arb.SendFlushAck(c.Flush.GetRequestId())
		}
	case *ipc.GetAsyncCommandResponse_StopDataSource_:
		p.stop.Store(true)
		p.wg.Wait()
		for _, w := range p.writers {
			_ = w.Close()
			p.invoke("UnregisterTraceWriter", &ipc.UnregisterTraceWriterRequest{TraceWriterId: proto.Uint32(uint32(w.ID()))}, true)
		}
		p.invoke("NotifyDataSourceStopped", &ipc.NotifyDataSourceStoppedRequest{DataSourceId: proto.Uint64(c.StopDataSource.GetInstanceId())}, true)
	}
	return nil
}

// write is one writer thread: track_event-sized packets (a timestamp and
// a payload of args.Size bytes in all) as fast as it can.
func (p *benchProd) write(w *smb.TraceWriter) {
	defer p.wg.Done()
	body := []byte(strings.Repeat("x", max(p.args.Size-16, 1)))
	pkt := make([]byte, 0, p.args.Size+16)
	seen := p.flushGen.Load()
	n := uint64(0)
	for !p.stop.Load() {
		for range 64 {
			pkt = protowire.AppendTag(pkt[:0], 8, protowire.VarintType) // timestamp
			pkt = protowire.AppendVarint(pkt, uint64(time.Now().UnixNano()))
			pkt = protowire.AppendTag(pkt, tracefile.FieldForTesting, protowire.BytesType)
			pkt = protowire.AppendBytes(pkt, body)
			_ = w.WritePacket(pkt)
			n++
		}
		if g := p.flushGen.Load(); g != seen {
			seen = g
			_ = w.Flush()
			if p.flushLeft.Add(-1) == 0 {
				p.arb.SendFlushAck(p.flushID.Load())
			}
		}
	}
	p.attempted.Add(n)
}

// BenchmarkPerfettoProducerPath reports, per run of a 3 s session: the
// service's CPU seconds per GB written (this process's rusage: the
// producer is a child), the delivered share of the packets the producer
// tried to write, the producer's CPU per packet, and this process's peak
// RSS. flush=100ms is the streaming default (flush_period =
// file_write_period); the others are the flush cadences of item 3.
//
// commit=posted batches commits as Perfetto's SDK does (its arbiter posts
// one flush task for the chunks returned until that task runs); the
// other cases commit every chunk on its own, the most messages a
// producer can send for the same data.
func BenchmarkPerfettoProducerPath(b *testing.B) {
	for _, size := range []int{200, 1024} {
		for _, writers := range []int{1, 2} {
			for _, flush := range []string{"100ms", "1s", "10s"} {
				b.Run(fmt.Sprintf("size=%d/writers=%d/flush=%s", size, writers, flush), func(b *testing.B) {
					benchProducerPath(b, size, writers, flush, false, 0)
				})
			}
			b.Run(fmt.Sprintf("size=%d/writers=%d/flush=100ms/commit=posted", size, writers), func(b *testing.B) {
				benchProducerPath(b, size, writers, "100ms", true, 0)
			})
			// As serve --perfetto --procs 1 runs it (docs/perfetto.md).
			b.Run(fmt.Sprintf("size=%d/writers=%d/flush=100ms/commit=posted/procs=1", size, writers), func(b *testing.B) {
				benchProducerPath(b, size, writers, "100ms", true, 1)
			})
		}
	}
}

// benchProducerPath runs the service with GOMAXPROCS procs (0: -cpu's).
func benchProducerPath(b *testing.B, size, writers int, flush string, posted bool, procs int) {
	if procs > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	}
	dir := b.TempDir()
	sock := filepath.Join(dir, "producer.sock")
	// The runs stream into tmpfs: a disk's filesystem costs the
	// writing process more kernel CPU per byte than tmpfs does.
	out := filepath.Join(testsupport.BenchDir(b, false), "trace.pftrace")
	var cpu, gb, delivered, emitted, prodCPU, drops, peak float64
	for b.Loop() {
		b.StopTimer()
		reg := NewProducers()
		host := ipc.NewHost(ipc.NewProducerPort(reg))
		if err := host.Listen(sock); err != nil {
			b.Fatal(err)
		}
		child, stdout := startBenchProducer(b, benchProducerArgs{Socket: sock, Writers: writers, Size: size, Posted: posted})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if missing := reg.WaitFor(ctx, []string{"bench.producer"}); len(missing) > 0 {
			b.Fatalf("the producer never registered")
		}
		cfg := cfgtest.LoadYAML(b, fmt.Sprintf(`
duration: 3s
write_into_file: true
file_write_period: 100ms
flush_period: %s
buffers: [{size_kb: 65536}]
perfetto: {enabled: true}
data_sources: [{name: bench.producer}]
sinks: [{type: file, path: %q}]
`, flush, out))
		s, err := pipeline.New(cfg, pipeline.Options{Perfetto: reg})
		if err != nil {
			b.Fatal(err)
		}
		var r0, r1 syscall.Rusage
		_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // resets VmHWM
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
		b.StartTimer()
		res, err := s.Run(ctx)
		b.StopTimer()
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
		peak = max(peak, vmHWM(b))
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		host.Close()
		if err := child.Wait(); err != nil {
			b.Fatalf("producer: %v", err)
		}
		var rep benchProducerReport
		if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
			b.Fatalf("producer report %q: %v", stdout.String(), err)
		}
		st, err := os.Stat(out)
		if err != nil {
			b.Fatal(err)
		}
		cpu += time.Duration(r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano()).Seconds()
		gb += float64(st.Size()) / 1e9
		delivered += float64(res.Packets) // with the service's few packets a second
		emitted += float64(rep.Attempted)
		prodCPU += rep.CPU
		drops += float64(rep.Dropped)
		_ = os.Remove(out)
		b.StartTimer()
	}
	b.ReportMetric(cpu/gb, "service-CPU-s/GB")
	b.ReportMetric(100*delivered/emitted, "delivered-%")
	b.ReportMetric(100*drops/emitted, "producer-drop-%")
	b.ReportMetric(prodCPU/emitted*1e9, "producer-ns/packet")
	b.ReportMetric(peak/(1<<20), "peak-RSS-MiB")
}

// vmHWM returns this process's peak RSS since the last reset.
func vmHWM(tb testing.TB) float64 {
	st, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(string(st), "\n") {
		var kb float64
		if _, err := fmt.Sscanf(l, "VmHWM: %f kB", &kb); err == nil {
			return kb * 1024
		}
	}
	tb.Fatal("no VmHWM in /proc/self/status")
	return 0
}
