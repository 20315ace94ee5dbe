package pipeline

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
	ipc "github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/smb"
	"github.com/tracepipe/tracepipe/tracefile"
)

// goldenRow is one frame of a capture's index.tsv.
type goldenRow struct {
	seq      int
	socket   string
	c2s      bool
	fds      int
	method   string
	frame    *ipc.Frame
	raw      []byte
	producer bool
}

func readGoldenRows(t *testing.T, dir string) []goldenRow {
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
		if len(c) < 12 || c[3] != "1" {
			continue // the first connection of each socket
		}
		r := goldenRow{socket: c[2], c2s: c[4] == "client->traced", method: c[11], producer: c[2] == "producer"}
		r.seq, _ = strconv.Atoi(c[0])
		r.fds, _ = strconv.Atoi(c[7])
		off, _ := strconv.Atoi(c[5])
		n, _ := strconv.Atoi(c[6])
		dirn := "s2c"
		if r.c2s {
			dirn = "c2s"
		}
		name := c[2] + ".conn1." + dirn + ".frames.bin"
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

// TestGoldenSessionReplay plays both clients of capture a_probes (the
// perfetto command and traced_probes) against tracepipe: the producer's
// recorded frames go to the producer socket, the consumer's to the
// consumer socket, each when the capture shows it. Where traced_probes
// wrote into the SMB (the capture has no SMB contents), the test writes
// the producer packets of the capture's trace at the place its recorded
// CommitData names. Every reply is checked against traced's (method
// tables, success flags, the GetAsyncCommand sequence with the configs
// the producer receives), and the ReadBuffers stream, rebuilt into
// packets, carries the same producer packets as traced's trace.
func TestGoldenSessionReplay(t *testing.T) {
	dir := testsupport.GoldenDir(t, "perfetto-ipc", "a_probes")
	rows := readGoldenRows(t, dir)
	goldenTrace := readTrace(t, filepath.Join(dir, "trace.pftrace"))
	var raw [][]byte
	for _, p := range goldenTrace {
		raw = append(raw, p.raw)
	}
	want := producerPackets(t, raw)
	if len(want) < 5 { // traced_probes wrote 5 sys_stats packets in a_probes
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
	prod, cons := dial(prodSock), dial(consSock)
	defer prod.close()
	defer cons.close()

	methods := map[string]map[uint64]string{"producer": {}, "consumer": {}}
	var mem *smb.SMB
	var ourFlush uint64
	var readBack [][]byte
	var cur []byte
	for _, r := range rows {
		conn := prod
		if !r.producer {
			conn = cons
		}
		where := fmt.Sprintf("seq %d %s %s", r.seq, r.socket, r.method)
		if r.c2s {
			methods[r.socket][r.frame.GetRequestId()] = r.method
			frame := r.raw
			if r.method == "CommitData" {
				var cd smb.CommitData
				if err := cd.Unmarshal(r.frame.GetMsgInvokeMethod().GetArgsProto()); err != nil {
					t.Fatal(err)
				}
				if len(cd.ChunksToMove) > 0 {
					writeGoldenPackets(t, mem, want)
				}
				if cd.FlushRequestID != 0 {
					// The flush id is ours, not traced's.
					cd.FlushRequestID = ourFlush
					inv := proto.Clone(r.frame).(*ipc.Frame)
					inv.GetMsgInvokeMethod().ArgsProto = cd.AppendMarshal(nil)
					var err error
					if frame, err = ipc.AppendFrame(nil, inv); err != nil {
						t.Fatal(err)
					}
				}
			}
			if _, err := conn.uc.Write(frame); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, fds, err := conn.recv()
		if err != nil {
			t.Fatalf("%s: %v", where, err)
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
		switch methods[r.socket][r.frame.GetRequestId()] {
		case "GetAsyncCommand":
			var wc, gc ipc.GetAsyncCommandResponse
			_ = proto.Unmarshal(w.GetReplyProto(), &wc)
			_ = proto.Unmarshal(g.GetReplyProto(), &gc)
			if f := gc.GetFlush(); f != nil {
				// Flush ids and flags are the service's own (tracepipe
				// does not tell the producer why it flushes).
				ourFlush = f.GetRequestId()
				if fmt.Sprint(f.GetDataSourceIds()) != fmt.Sprint(wc.GetFlush().GetDataSourceIds()) || ourFlush == 0 {
					t.Fatalf("%s: %v, traced %v", where, &gc, &wc)
				}
				break
			}
			if !proto.Equal(&wc, &gc) {
				t.Fatalf("%s: command %v, traced %v", where, &gc, &wc)
			}
			if gc.GetSetupTracing() != nil {
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
		default:
			if !bytes.Equal(w.GetReplyProto(), g.GetReplyProto()) || w.GetHasMore() != g.GetHasMore() {
				t.Fatalf("%s: %v, traced %v", where, got, r.frame)
			}
		}
		for _, fd := range fds {
			unix.Close(fd)
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
