package perfettosvc

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	ipc "github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/smb"
	"github.com/tracepipe/tracepipe/tracefile"
)

// goldenRow is one frame of a capture's index.tsv.
type goldenRow struct {
	seq      int
	socket   string
	conn     string // the proxy's connection number on that socket
	c2s      bool
	fds      int
	method   string
	frame    *ipc.Frame
	raw      []byte
	producer bool
}

func readGoldenRows(t *testing.T, dir string) []goldenRow { return readGoldenConnRows(t, dir, "1") }

// readGoldenConnRows reads the rows of the producer connection prodConn
// and of every consumer connection.
func readGoldenConnRows(t *testing.T, dir, prodConn string) []goldenRow {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "index.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	streams := map[string][]byte{}
	var rows []goldenRow
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	sc.Scan()
	for sc.Scan() {
		c := strings.Split(sc.Text(), "\t")
		if len(c) < 12 || c[2] == "producer" && c[3] != prodConn {
			continue // the producer's one connection
		}
		r := goldenRow{socket: c[2], conn: c[3], c2s: c[4] == "client->traced", method: c[11], producer: c[2] == "producer"}
		r.seq, _ = strconv.Atoi(c[0])
		r.fds, _ = strconv.Atoi(c[7])
		off, _ := strconv.Atoi(c[5])
		n, _ := strconv.Atoi(c[6])
		dirn := "s2c"
		if r.c2s {
			dirn = "c2s"
		}
		name := c[2] + ".conn" + c[3] + "." + dirn + ".frames.bin"
		if streams[name] == nil {
			if streams[name], err = os.ReadFile(filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
		r.raw = streams[name][off : off+n]
		r.frame = &ipc.Frame{}
		if err := proto.Unmarshal(r.raw[4:], r.frame); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	return rows
}

// stripTraced removes what the service appends to a producer's packet
// (trusted uid, sequence id, pid, previous_packet_dropped,
// first_packet_on_sequence), leaving what the producer wrote.
func stripTraced(t *testing.T, p []byte) []byte {
	t.Helper()
	var out []byte
	for b := p; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if n < 0 || m < 0 {
			t.Fatalf("malformed packet %x", p)
		}
		switch num {
		case tracefile.FieldTrustedUID, tracefile.FieldTrustedSequenceID, tracefile.FieldTrustedPID, 42, 87:
		default:
			out = append(out, b[:n+m]...)
		}
		b = b[n+m:]
	}
	return out
}

// producerPackets returns the producer packets (sequence id != 1, the
// service's own) of a trace, stripped of the service's fields.
func producerPackets(t *testing.T, pkts [][]byte) [][]byte {
	t.Helper()
	var out [][]byte
	for _, p := range pkts {
		info, err := tracefile.DecodePacket(p)
		if err != nil {
			t.Fatal(err)
		}
		if info.SequenceID > 1 {
			out = append(out, stripTraced(t, p))
		}
	}
	return out
}

// TestGoldenSessionReplay plays both clients of a capture (the perfetto
// command and traced_probes) against tracepipe: the producer's recorded
// frames go to the producer socket, the consumer's to the consumer
// socket, each when the capture shows it (the output file passed where
// the capture passed one). Where traced_probes wrote into the SMB (the
// capture has no SMB contents), the test writes the producer packets of
// the capture's trace at the first CommitData that moves a chunk. Every
// reply is checked against traced's (method tables, success flags, the
// GetAsyncCommand sequence with the configs the producer receives), and
// the ReadBuffers stream (or the file), rebuilt into packets, carries the
// same producer packets as traced's trace.
//
// What legitimately differs, and is tolerated: flush ids and flags; when
// flushes happen (periodic ones in write_into_file mode, c and f, come at
// each service's own times; tracepipe also flushes when a session stops,
// traced does not after a consumer's Flush, e): a flush tracepipe sends
// where the capture has none is acknowledged, a recorded flush tracepipe
// did not send there is skipped with the producer's answer; the number of
// ReadBuffers replies (h); pids, versions and session lists in
// QueryServiceState (f); and CommitData patches, which name
// traced_probes' own chunks (the replay's writer lays its chunks out
// itself, so the recorded patches are not applied).
func TestGoldenSessionReplay(t *testing.T) {
	for _, tc := range []struct{ capture, prodConn string }{
		{"a_probes", "1"}, {"b_track_event", "1"}, {"c_probes_write_into_file", "1"}, {"e_probes_sigint", "1"}, {"f_probes_detach_attach", "1"},
		{"g_sdk_startup_tracing", "2"}, {"h_probes_large_readbuffers", "1"},
	} {
		t.Run(tc.capture, func(t *testing.T) { replayGoldenSession(t, tc.capture, tc.prodConn) })
	}
}

// received is a frame read from a socket, with its descriptors.
type received struct {
	f   *ipc.Frame
	fds []int
}

func replayGoldenSession(t *testing.T, capture, prodConn string) {
	dir := testsupport.GoldenDir(t, "perfetto-ipc", capture)
	rows := readGoldenConnRows(t, dir, prodConn)
	goldenTrace := tracetest.ReadTrace(t, filepath.Join(dir, "trace.pftrace"))
	var raw [][]byte
	for _, p := range goldenTrace {
		raw = append(raw, p.Raw)
	}
	want := producerPackets(t, raw)
	if len(want) < 3 { // the producers wrote 3 (f) to 201 (h) packets
		t.Fatalf("%d producer packets in the golden trace", len(want))
	}

	prodSock, consSock, _ := perfettoService(t)
	dial := func(path string) *perfettoDouble {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		return &perfettoDouble{t: t, uc: c.(*net.UnixConn)}
	}
	prod := dial(prodSock)
	defer prod.close()
	// Consumer connections open as the capture's do; a new one means the
	// perfetto command before it exited (f: detach, query, attach).
	conss := map[string]*perfettoDouble{}
	consumer := func(conn string) *perfettoDouble {
		if c := conss[conn]; c != nil {
			return c
		}
		for k, c := range conss {
			c.close()
			delete(conss, k)
		}
		conss[conn] = dial(consSock)
		return conss[conn]
	}
	defer func() {
		for _, c := range conss {
			c.close()
		}
	}()
	var enableConfig []byte // the TraceConfig the consumer sent
	outPath := filepath.Join(t.TempDir(), "trace.pftrace")

	methods := map[string]map[uint64]string{"producer": {}} // by socket and connection
	var mem *smb.SMB
	var ourFlush, gacRID uint64
	var readBack [][]byte
	var cur []byte
	written := false
	moved := map[[2]uint32]bool{}
	pushedBack := map[string]*received{}
	readDone := map[string]bool{} // ReadBuffers requests already read to their end (connection/request)
	skipProducer := false         // skipping the producer's answer to a flush tracepipe did not send
	extraFlushes := 0
	recv := func(socket string, conn *perfettoDouble) received {
		if r := pushedBack[socket]; r != nil {
			pushedBack[socket] = nil
			return *r
		}
		f, fds, err := conn.recv()
		if err != nil {
			t.Fatalf("%s socket: %v", socket, err)
		}
		return received{f, fds}
	}
	ackFlush := func(id uint64) {
		var cd smb.CommitData
		cd.FlushRequestID = id
		prod.invokeRawID(methodID(t, methods, "CommitData"), cd.AppendMarshal(nil))
	}
	for i, r := range rows {
		conn := prod
		key := "producer"
		if !r.producer {
			conn = consumer(r.conn)
			key = "consumer" + r.conn
			if methods[key] == nil {
				methods[key] = map[uint64]string{}
			}
		}
		where := fmt.Sprintf("%s seq %d %s %s", capture, r.seq, key, r.method)
		rkey := fmt.Sprint(key, "/", r.frame.GetRequestId())
		if r.producer && skipProducer {
			if r.c2s || methods["producer"][r.frame.GetRequestId()] != "GetAsyncCommand" {
				continue
			}
			skipProducer = false
		}
		if r.c2s {
			methods[key][r.frame.GetRequestId()] = r.method
			frame := r.raw
			switch r.method {
			case "GetAsyncCommand":
				gacRID = r.frame.GetRequestId()
			case "EnableTracing":
				if tc := ipcEnableConfig(t, r.frame); tc != nil {
					enableConfig = tc
				}
			case "RegisterTraceWriter":
				// The producer writes once its writer exists (g never
				// commits: traced scraped its SMB at stop).
				if !written {
					writeGoldenPackets(t, mem, want)
					written = true
				}
			case "CommitData":
				var cd smb.CommitData
				if err := cd.Unmarshal(r.frame.GetMsgInvokeMethod().GetArgsProto()); err != nil {
					t.Fatal(err)
				}
				if len(cd.ChunksToMove) > 0 && !written {
					writeGoldenPackets(t, mem, want)
					written = true
				}
				cd.ChunksToPatch = nil // traced_probes' chunks, not the replay's
				// A chunk moved once is free again in the SMB: traced_probes
				// had refilled it (c), the replay has nothing more to write.
				kept := cd.ChunksToMove[:0]
				for _, m := range cd.ChunksToMove {
					if k := [2]uint32{m.Page, m.Chunk}; !moved[k] {
						moved[k] = true
						kept = append(kept, m)
					}
				}
				cd.ChunksToMove = kept
				if cd.FlushRequestID != 0 {
					cd.FlushRequestID = ourFlush // the flush id is ours, not traced's
				}
				inv := proto.Clone(r.frame).(*ipc.Frame)
				inv.GetMsgInvokeMethod().ArgsProto = cd.AppendMarshal(nil)
				var err error
				if frame, err = ipc.AppendFrame(nil, inv); err != nil {
					t.Fatal(err)
				}
			}
			if r.fds > 0 && r.method == "InitializeConnection" {
				// The producer's own SMB (startup tracing, g): a sealed
				// memfd the replay maps too, to write into.
				var ic ipc.InitializeConnectionRequest
				if err := proto.Unmarshal(r.frame.GetMsgInvokeMethod().GetArgsProto(), &ic); err != nil {
					t.Fatal(err)
				}
				fd := testsupport.SealedMemfd(t, int(ic.GetSharedMemorySizeHintBytes()))
				_, _, err := conn.uc.WriteMsgUnix(frame, unix.UnixRights(fd), nil)
				if err != nil {
					t.Fatal(err)
				}
				if mem, err = smb.MapFD(fd, int(ic.GetSharedMemoryPageSizeHintBytes())); err != nil {
					t.Fatal(err)
				}
				defer mem.Close()
				continue
			}
			if r.fds > 0 { // the output file, as perfetto -o passes it
				f, err := os.OpenFile(outPath, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
				if err != nil {
					t.Fatal(err)
				}
				_, _, err = conn.uc.WriteMsgUnix(frame, unix.UnixRights(int(f.Fd())), nil)
				f.Close()
				if err != nil {
					t.Fatal(err)
				}
				continue
			}
			if _, err := conn.uc.Write(frame); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if readDone[rkey] {
			continue // a later reply of a ReadBuffers stream already read
		}
		var got *ipc.Frame
		var fds []int
		for {
			rc := recv(r.socket, conn)
			got, fds = rc.f, rc.fds
			if !r.producer || got.GetRequestId() != gacRID || methods["producer"][r.frame.GetRequestId()] != "GetAsyncCommand" {
				break
			}
			var wc, gc ipc.GetAsyncCommandResponse
			_ = proto.Unmarshal(r.frame.GetMsgInvokeMethodReply().GetReplyProto(), &wc)
			_ = proto.Unmarshal(got.GetMsgInvokeMethodReply().GetReplyProto(), &gc)
			if gc.GetFlush() != nil && wc.GetFlush() == nil {
				// tracepipe flushes before it stops: acknowledge, read on.
				extraFlushes++
				ackFlush(gc.GetFlush().GetRequestId())
				continue
			}
			if gc.GetFlush() == nil && wc.GetFlush() != nil {
				// traced's periodic flush: tracepipe sent none here.
				pushedBack[r.socket] = &rc
				skipProducer = true
				break
			}
			break
		}
		if skipProducer {
			continue
		}
		if len(fds) != r.fds {
			t.Fatalf("%s: %d descriptors, traced sent %d", where, len(fds), r.fds)
		}
		if got.GetRequestId() != r.frame.GetRequestId() {
			t.Fatalf("%s: request id %d, traced %d (%v)", where, got.GetRequestId(), r.frame.GetRequestId(), got)
		}
		if w := r.frame.GetMsgBindServiceReply(); w != nil {
			if !proto.Equal(w, got.GetMsgBindServiceReply()) {
				t.Fatalf("%s: %v, traced %v", where, got, w)
			}
			continue
		}
		w, g := r.frame.GetMsgInvokeMethodReply(), got.GetMsgInvokeMethodReply()
		if g == nil || w.GetSuccess() != g.GetSuccess() || (w.Success == nil) != (g.Success == nil) {
			t.Fatalf("%s: %v, traced %v", where, got, r.frame)
		}
		switch methods[key][r.frame.GetRequestId()] {
		case "GetAsyncCommand":
			var wc, gc ipc.GetAsyncCommandResponse
			_ = proto.Unmarshal(w.GetReplyProto(), &wc)
			_ = proto.Unmarshal(g.GetReplyProto(), &gc)
			if f := gc.GetFlush(); f != nil {
				// Flush ids and flags are the service's own.
				ourFlush = f.GetRequestId()
				if fmt.Sprint(f.GetDataSourceIds()) != fmt.Sprint(wc.GetFlush().GetDataSourceIds()) || ourFlush == 0 {
					t.Fatalf("%s: %v, traced %v", where, &gc, &wc)
				}
				break
			}
			if !proto.Equal(&wc, &gc) {
				t.Fatalf("%s: command %v, traced %v", where, &gc, &wc)
			}
			if gc.GetSetupTracing() != nil && len(fds) == 1 { // (g: the producer's own SMB, no descriptor)
				var err error
				if mem, err = smb.MapFD(fds[0], int(gc.GetSetupTracing().GetSharedBufferPageSizeKb())*1024); err != nil {
					t.Fatal(err)
				}
				defer mem.Close()
				fds = nil
			}
		case "EnableTracing":
			var er ipc.EnableTracingResponse
			if proto.Unmarshal(g.GetReplyProto(), &er) != nil || !er.GetDisabled() || er.Error != nil {
				t.Fatalf("%s: %v", where, &er)
			}
		case "ReadBuffers":
			readDone[rkey] = true
			for {
				var rb ipc.ReadBuffersResponse
				if err := proto.Unmarshal(g.GetReplyProto(), &rb); err != nil {
					t.Fatal(err)
				}
				for _, s := range rb.GetSlices() {
					cur = append(cur, s.GetData()...)
					if s.GetLastSliceForPacket() {
						readBack = append(readBack, cur)
						cur = nil
					}
				}
				if !g.GetHasMore() {
					break
				}
				f, _, err := conn.recv()
				if err != nil || f.GetRequestId() != r.frame.GetRequestId() {
					t.Fatalf("%s: next reply %v %v", where, f, err)
				}
				g = f.GetMsgInvokeMethodReply()
			}
		case "Attach":
			// The session's TraceConfig, as the consumer sent it.
			var ar ipc.AttachResponse
			if proto.Unmarshal(g.GetReplyProto(), &ar) != nil || !bytes.Equal(ar.GetTraceConfig(), enableConfig) || g.GetHasMore() {
				t.Fatalf("%s: %v, want the enabled config", where, got)
			}
		case "QueryServiceState":
			// The same producers and data sources; pids, versions and
			// session lists are each service's own.
			var wq, gq ipc.QueryServiceStateResponse
			if proto.Unmarshal(w.GetReplyProto(), &wq) != nil || proto.Unmarshal(g.GetReplyProto(), &gq) != nil || g.GetHasMore() {
				t.Fatalf("%s: %v", where, got)
			}
			names := func(st *ipc.TracingServiceState) string {
				var n []string
				for _, p := range st.GetProducers() {
					n = append(n, "producer "+p.GetName())
				}
				for _, d := range st.GetDataSources() {
					n = append(n, d.GetDsDescriptor().GetName())
				}
				return strings.Join(n, ",")
			}
			if names(wq.GetServiceState()) != names(gq.GetServiceState()) {
				t.Fatalf("%s: %s, traced %s", where, names(gq.GetServiceState()), names(wq.GetServiceState()))
			}
			// The sessions as traced lists them (f: the detached one); the
			// consumer's uid is this process's (the capture ran as root).
			ws, gs := wq.GetServiceState().GetTracingSessions(), gq.GetServiceState().GetTracingSessions()
			for _, x := range ws {
				x.ConsumerUid = proto.Int32(int32(os.Getuid()))
			}
			if len(ws) != len(gs) || len(ws) > 0 && !proto.Equal(ws[0], gs[0]) {
				t.Fatalf("%s: sessions %v, traced %v", where, gs, ws)
			}
		default:
			if !bytes.Equal(w.GetReplyProto(), g.GetReplyProto()) || w.GetHasMore() != g.GetHasMore() {
				t.Fatalf("%s: %v, traced %v", where, got, r.frame)
			}
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
		_ = i
	}
	if readBack == nil { // write_into_file: the trace is in the passed file
		for _, p := range tracetest.ReadTrace(t, outPath) {
			readBack = append(readBack, p.Raw)
		}
	}
	got := producerPackets(t, readBack)
	if len(got) != len(want) {
		t.Fatalf("%d producer packets read back, traced's trace has %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("producer packet %d: %x, traced's %x", i, got[i], want[i])
		}
	}
	t.Logf("%s: %d producer packets as traced's; %d flushes tracepipe sent that traced did not (periodic, or at stop)", capture, len(got), extraFlushes)
}

// ipcEnableConfig is the trace_config of an EnableTracing invoke (nil
// for attach_notification_only).
func ipcEnableConfig(t *testing.T, f *ipc.Frame) []byte {
	t.Helper()
	var er ipc.EnableTracingRequest
	if err := proto.Unmarshal(f.GetMsgInvokeMethod().GetArgsProto(), &er); err != nil {
		t.Fatal(err)
	}
	return er.GetTraceConfig()
}

// methodID is the id the producer socket's bind reply gave method.
func methodID(t *testing.T, methods map[string]map[uint64]string, method string) uint32 {
	t.Helper()
	for i, m := range ipc.ProducerPortMethods {
		if m == method {
			return uint32(i + 1)
		}
	}
	t.Fatalf("no method %s", method)
	return 0
}

// invokeRawID invokes a method by id with drop_reply (the replay's own
// request ids start far above the capture's).
func (pd *perfettoDouble) invokeRawID(method uint32, args []byte) {
	pd.rid++
	f := &ipc.Frame{RequestId: proto.Uint64(1<<20 + pd.rid), Msg: &ipc.Frame_MsgInvokeMethod{MsgInvokeMethod: &ipc.Frame_InvokeMethod{
		ServiceId: proto.Uint32(1), MethodId: proto.Uint32(method), ArgsProto: args, DropReply: proto.Bool(true)}}}
	if err := pd.send(f); err != nil {
		pd.t.Fatal(err)
	}
}

// writeGoldenPackets writes packets into the SMB the way traced_probes
// did: one writer (id 1), its first chunk (page 0, chunk 0), returned.
func writeGoldenPackets(t *testing.T, mem *smb.SMB, pkts [][]byte) {
	t.Helper()
	if mem == nil {
		t.Fatal("CommitData before the SMB arrived")
	}
	arb, err := smb.NewArbiter(mem, smb.ArbiterOptions{OnCommit: func(*smb.CommitData) {}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := arb.NewTraceWriter(1, smb.Stall)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkts {
		if err := w.WritePacket(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
}
