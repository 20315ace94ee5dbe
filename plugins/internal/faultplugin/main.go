// Command faultplugin is a misbehaving data-source plugin for the service's
// fault-containment tests. It serves "fault.source"; config "mode" picks the
// fault, "packets" how many good packets it writes first:
//
//	ok          write packets, then be done (plugins.Finite)
//	kill        write and flush packets, then SIGKILL itself
//	kill_unflushed write and flush packets; at the first Flush, before
//	            acknowledging it, write "packets" more (indices packets..
//	            2*packets-1) without flushing and SIGKILL itself: the SMB
//	            is left with complete chunks whose commits were still
//	            batched and a half-written chunk
//	panic       write and flush packets, then panic (exit status 2)
//	hang_flush  write packets; Flush never returns
//	hang_start  Start never returns
//	exit_start  log two lines to stderr and exit with status 2 in Start
//	spoof       write packets; every odd one also sets trusted_uid and
//	            trusted_packet_sequence_id (the service must drop those)
//	garbage_smb write packets, then overwrite the whole SMB with garbage
//	flush_marks write packets, then run until stopped; every flush first
//	            writes a mark packet, TestEvent{str: "flush:" + reason},
//	            the FlushFlags reason the service sent (TRACE_CLONE ...)
//	spawn       in Start, start two processes that outlive the plugin
//	            unless it is contained: `setsid sleep <tag>` and one
//	            double-forked by a setsid'd shell (an orphan at once);
//	            write their pids, one a line, to config "pidfile"; then
//	            write packets and run until stopped. With config
//	            inherit_stderr: true the first keeps the plugin's stderr
//	            (fd 2) open
//	alloc       write and flush packets; at the first Flush (so well after
//	            Start returned to the service) allocate and touch memory
//	            (1 MiB at a time) until something stops it; past 1 GiB
//	            (a limit that did not work) it logs so and waits to be
//	            stopped, sparing the machine
//	spin        write and flush packets, then burn CPU on one thread until
//	            stopped (or for 30 s of wall time, a limit that did not
//	            work)
//	stderr_flood write and flush packets, then write config "flood_mb"
//	            MiB (default 100) of 100-byte lines to stderr (in writes
//	            of 655 lines), then be done (plugins.Finite)
//
// Run under the name "faultplugin-raw" (a symlink), it is instead a
// hand-made protocol server that commits out-of-range chunk indices, a
// target buffer it may not write and bytes that are no CommitData, and
// acknowledges flushes.
//
// Packet i carries for_testing = TestEvent{seq_value: i, str: "fault"}.
// It is a test tool: the package is internal and nothing else imports it.
package main

import (
	"context"
	"fmt"
	"log"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/plugins/internal/wire"
	"github.com/tracepipe/tracepipe/plugins/sdk"
	"github.com/tracepipe/tracepipe/smb"
)

// Name is the data source this plugin serves.
const Name = "fault.source"

func main() {
	if filepath.Base(os.Args[0]) == "faultplugin-raw" {
		serveRaw()
		return
	}
	sdk.ServeSources(sdk.Source{Name: Name, Description: "misbehaves on purpose (tests)", Factory: newFault})
}

type fault struct {
	mode    string
	packets int
	pidfile string
	tag     string
	floodMB int
	inherit bool
	allocGo chan struct{} // alloc: closed by the first Flush
	goOnce  sync.Once
	done    chan struct{}
	stop    chan struct{}
	once    sync.Once
	mu      sync.Mutex // guards w between the writing goroutine and Flush
	w       plugins.PacketWriter
}

func newFault(cfg map[string]any) (plugins.DataSource, error) {
	f := &fault{mode: "ok", packets: 100, done: make(chan struct{}), stop: make(chan struct{}), allocGo: make(chan struct{})}
	if m, ok := cfg["mode"].(string); ok {
		f.mode = m
	}
	if n, ok := cfg["packets"].(float64); ok && n >= 0 && n == math.Trunc(n) {
		f.packets = int(n)
	}
	f.pidfile, _ = cfg["pidfile"].(string)
	f.tag, _ = cfg["tag"].(string)
	f.inherit, _ = cfg["inherit_stderr"].(bool)
	f.floodMB = 100
	if n, ok := cfg["flood_mb"].(float64); ok && n >= 0 && n == math.Trunc(n) {
		f.floodMB = int(n)
	}
	return f, nil
}

// packet encodes packet i; spoofed ones set two trusted fields.
func packet(i int, spoof bool) []byte { return packetStr(i, spoof, "fault") }

func packetStr(i int, spoof bool, str string) []byte {
	var ev []byte
	ev = protowire.AppendTag(ev, 1, protowire.BytesType)
	ev = protowire.AppendString(ev, str)
	ev = protowire.AppendTag(ev, 2, protowire.VarintType)
	ev = protowire.AppendVarint(ev, uint64(i))
	var b []byte
	b = protowire.AppendTag(b, 8, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(i+1))
	if spoof {
		b = protowire.AppendTag(b, 3, protowire.VarintType) // trusted_uid
		b = protowire.AppendVarint(b, 0)
		b = protowire.AppendTag(b, 10, protowire.VarintType) // trusted_packet_sequence_id
		b = protowire.AppendVarint(b, 1)
	}
	b = protowire.AppendTag(b, 900, protowire.BytesType)
	return protowire.AppendBytes(b, ev)
}

func (f *fault) Start(h plugins.Host) error {
	switch f.mode {
	case "hang_start":
		select {}
	case "exit_start":
		log.Print("fault: opening /dev/fault0: no such device")
		log.Print("fault: giving up")
		os.Exit(2)
	case "spawn":
		if err := f.spawn(); err != nil {
			return err
		}
	}
	w, err := h.NewWriter()
	if err != nil {
		return err
	}
	f.w = w
	go f.run()
	return nil
}

func (f *fault) run() {
	defer close(f.done)
	f.mu.Lock()
	for i := 0; i < f.packets; i++ {
		if err := f.w.WritePacket(packet(i, f.mode == "spoof" && i%2 == 1)); err != nil {
			log.Printf("fault: packet %d: %v", i, err)
		}
	}
	err := f.w.Flush()
	f.mu.Unlock()
	if err != nil {
		log.Printf("fault: flush: %v", err)
	}
	if f.mode == "kill" || f.mode == "panic" {
		// Die mid-trace, well after Start returned to the host.
		time.Sleep(300 * time.Millisecond)
	}
	switch f.mode {
	case "alloc":
		select {
		case <-f.allocGo:
		case <-f.stop:
			return
		}
		allocForever(1 << 30)
		log.Print("fault: allocated 1 GiB and nothing stopped it")
		<-f.stop
	case "stderr_flood":
		flood(f.floodMB)
	case "spin":
		spin(f.stop, 30*time.Second)
	}
	switch f.mode {
	case "kill":
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	case "panic":
		panic("fault: the data source panicked on purpose")
	case "garbage_smb":
		garbage()
	}
	if f.mode == "hang_flush" || f.mode == "garbage_smb" || f.mode == "flush_marks" || f.mode == "spawn" || f.mode == "kill_unflushed" {
		<-f.stop
	}
}

// spawn starts `setsid sleep <tag>` and, through a setsid'd shell that
// exits at once, an orphaned `sleep <tag>`; it writes both pids to
// f.pidfile.
func (f *fault) spawn() error {
	if f.pidfile == "" || f.tag == "" {
		return fmt.Errorf("mode spawn needs pidfile and tag")
	}
	child := exec.Command("sleep", f.tag)
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if f.inherit {
		child.Stderr = os.NewFile(2, "stderr")
	}
	if err := child.Start(); err != nil {
		return err
	}
	sh := exec.Command("sh", "-c", `sleep "$1" >/dev/null 2>&1 </dev/null & echo $!`, "sh", f.tag)
	sh.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := sh.Output()
	if err != nil {
		return fmt.Errorf("double fork: %v", err)
	}
	pids := fmt.Sprintf("%d\n%s", child.Process.Pid, out)
	return os.WriteFile(f.pidfile, []byte(pids), 0o644)
}

// sink keeps what allocForever allocated reachable.
var sink [][]byte

// allocForever allocates and touches memory until the process dies or
// limit bytes are allocated.
func allocForever(limit int) {
	for len(sink)<<20 < limit {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		sink = append(sink, b)
	}
}

// spin keeps one thread busy until stop is closed or d passed.
func spin(stop <-chan struct{}, d time.Duration) {
	end := time.Now().Add(d)
	for x := uint64(1); time.Now().Before(end); x = x*6364136223846793005 + 1 {
		select {
		case <-stop:
			return
		default:
		}
	}
}

// flood writes mb MiB of 100-byte lines to stderr.
func flood(mb int) {
	line := []byte(strings.Repeat("x", 99) + "\n")
	buf := make([]byte, 0, 64<<10)
	for len(buf)+len(line) <= cap(buf) {
		buf = append(buf, line...)
	}
	for written := 0; written < mb<<20; written += len(buf) {
		if _, err := os.Stderr.Write(buf); err != nil {
			return
		}
	}
}

// garbage maps the SMB a second time and fills it with a byte pattern
// that makes every chunk header and fragment nonsense.
func garbage() {
	shm, err := smb.MapFD(wire.SMBFd, 4096)
	if err != nil {
		log.Printf("fault: mapping the SMB: %v", err)
		return
	}
	mem := shm.Bytes()
	for i := range mem {
		mem[i] = byte(i*131 + 7)
	}
}

func (f *fault) Flush() error { return f.FlushWithFlags(0) }

// FlushWithFlags is plugins.FlagsFlusher: mode flush_marks writes the
// reason into the trace before flushing.
func (f *fault) FlushWithFlags(flags plugins.FlushFlags) error {
	if f.mode == "flush_marks" {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := f.w.WritePacket(packetStr(f.packets, false, "flush:"+flags.Reason().String())); err != nil {
			return err
		}
		return f.w.Flush()
	}
	if f.mode == "hang_flush" {
		select {}
	}
	if f.mode == "alloc" {
		f.goOnce.Do(func() { close(f.allocGo) })
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mode == "kill_unflushed" {
		for i := f.packets; i < 2*f.packets; i++ {
			if err := f.w.WritePacket(packet(i, false)); err != nil {
				log.Printf("fault: packet %d: %v", i, err)
			}
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal ends the process
	}
	select {
	case <-f.done:
		return nil
	default:
	}
	return f.w.Flush()
}

func (f *fault) ClearIncrementalState() {}

func (f *fault) Stop() error {
	f.once.Do(func() { close(f.stop) })
	<-f.done
	return nil
}

func (f *fault) Done() <-chan struct{} {
	if f.mode == "ok" || f.mode == "stderr_flood" {
		return f.done
	}
	return nil
}

// rawServer speaks the protocol by hand to send what the SDK never would.
type rawServer struct {
	wire.UnimplementedDataSourceServer
	msgs    chan []byte
	stopped chan struct{}
	once    sync.Once
}

func serveRaw() {
	srv := &rawServer{msgs: make(chan []byte, 64), stopped: make(chan struct{})}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: wire.Handshake,
		Plugins:         plugin.PluginSet{wire.PluginName: &wire.Plugin{Impl: srv}},
		GRPCServer:      plugin.DefaultGRPCServer,
	})
}

func (r *rawServer) Setup(context.Context, *wire.SetupRequest) (*wire.SetupResponse, error) {
	return &wire.SetupResponse{}, nil
}

func (r *rawServer) Start(context.Context, *wire.StartRequest) (*wire.StartResponse, error) {
	bad := []smb.CommitData{
		{ChunksToMove: []smb.ChunkToMove{{Page: 1 << 20, Chunk: 0, TargetBuffer: 1}}}, // page out of range
		{ChunksToMove: []smb.ChunkToMove{{Page: 0, Chunk: 200, TargetBuffer: 1}}},     // chunk out of range
		{ChunksToMove: []smb.ChunkToMove{{Page: 0, Chunk: 0, TargetBuffer: 99}}},      // not its buffer
	}
	for i := range bad {
		r.msgs <- bad[i].AppendMarshal(nil)
	}
	r.msgs <- []byte{0xff, 0xff, 0xff} // not a CommitData
	return &wire.StartResponse{}, nil
}

func (r *rawServer) Flush(_ context.Context, in *wire.FlushRequest) (*wire.FlushResponse, error) {
	ack := smb.CommitData{FlushRequestID: in.GetFlushRequestId()}
	r.msgs <- ack.AppendMarshal(nil)
	return &wire.FlushResponse{}, nil
}

func (r *rawServer) ClearIncrementalState(context.Context, *wire.ClearIncrementalStateRequest) (*wire.ClearIncrementalStateResponse, error) {
	return &wire.ClearIncrementalStateResponse{}, nil
}

func (r *rawServer) Stop(context.Context, *wire.StopRequest) (*wire.StopResponse, error) {
	r.once.Do(func() { close(r.stopped) })
	return &wire.StopResponse{}, nil
}

func (r *rawServer) Commits(_ *wire.CommitsRequest, stream grpc.ServerStreamingServer[wire.PluginMessage]) error {
	send := func(b []byte) error {
		return stream.Send(&wire.PluginMessage{Kind: &wire.PluginMessage_CommitData{CommitData: b}})
	}
	for {
		select {
		case b := <-r.msgs:
			if err := send(b); err != nil {
				return err
			}
		case <-r.stopped:
			for {
				select {
				case b := <-r.msgs:
					if err := send(b); err != nil {
						return err
					}
				default:
					return nil
				}
			}
		case <-stream.Context().Done():
			return fmt.Errorf("fault: stream: %w", stream.Context().Err())
		}
	}
}
