package perfettoipc

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/smb"
)

// recordingBackend records what the producer port told the service.
type recordingBackend struct {
	mu        sync.Mutex
	producers chan *Producer
	events    []string
	flushAcks []uint64
	moved     int
	patched   int
	badCommit int
}

func newRecordingBackend() *recordingBackend {
	return &recordingBackend{producers: make(chan *Producer, 4)}
}

func (b *recordingBackend) add(ev string) {
	b.mu.Lock()
	b.events = append(b.events, ev)
	b.mu.Unlock()
}
func (b *recordingBackend) Connected(p *Producer)    { b.add("connected " + p.Name()); b.producers <- p }
func (b *recordingBackend) Disconnected(p *Producer) { b.add("disconnected") }
func (b *recordingBackend) DataSourceRegistered(p *Producer, d *DataSourceDescriptor) {
	b.add("registered " + d.GetName())
}
func (b *recordingBackend) DataSourceUnregistered(p *Producer, name string) {
	b.add("unregistered " + name)
}
func (b *recordingBackend) Commit(p *Producer, data []byte, _ *smb.CommitData) {
	var cd smb.CommitData
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := cd.Unmarshal(data); err != nil {
		b.badCommit++
		return
	}
	b.moved += len(cd.ChunksToMove)
	b.patched += len(cd.ChunksToPatch)
	if cd.FlushRequestID != 0 {
		b.flushAcks = append(b.flushAcks, cd.FlushRequestID)
	}
}
func (b *recordingBackend) DataSourceStarted(p *Producer, id uint64) {
	b.add("started " + strconv.FormatUint(id, 10))
}
func (b *recordingBackend) DataSourceStopped(p *Producer, id uint64) {
	b.add("stopped " + strconv.FormatUint(id, 10))
}

// indexRow is one row of a capture's index.tsv.
type indexRow struct {
	seq      int
	socket   string
	conn     int
	c2s      bool
	offset   int
	length   int
	fds      int
	kind     string
	method   string
	rawFrame []byte
}

func readIndex(t *testing.T, dir, socket string) []indexRow {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "index.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	streams := map[string][]byte{}
	var rows []indexRow
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	sc.Scan() // header
	for sc.Scan() {
		c := strings.Split(sc.Text(), "\t")
		if len(c) < 12 || c[2] != socket {
			continue
		}
		r := indexRow{socket: c[2], c2s: c[4] == "client->traced", kind: c[9], method: c[11]}
		r.seq, _ = strconv.Atoi(c[0])
		r.conn, _ = strconv.Atoi(c[3])
		r.offset, _ = strconv.Atoi(c[5])
		r.length, _ = strconv.Atoi(c[6])
		r.fds, _ = strconv.Atoi(c[7])
		dirn := "s2c"
		if r.c2s {
			dirn = "c2s"
		}
		name := socket + ".conn" + c[3] + "." + dirn + ".frames.bin"
		if streams[name] == nil {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			streams[name] = b
		}
		r.rawFrame = streams[name][r.offset : r.offset+r.length]
		rows = append(rows, r)
	}
	return rows
}

func decodeRaw(t *testing.T, raw []byte) *Frame {
	t.Helper()
	var f Frame
	if err := proto.Unmarshal(raw[headerSize:], &f); err != nil {
		t.Fatal(err)
	}
	return &f
}

// TestGoldenProducerReplay replays each capture's producer frames to the
// producer port and checks every reply against traced's: method table,
// success flags, has_more, InitializeConnection's answer, and the
// GetAsyncCommand command sequence (kinds, instance ids, configs' names
// and buffers, SMB page size and descriptor, flush ids and flags). Where
// traced sent a command because a consumer acted, the test makes the same
// call on the Producer (it plays the service).
func TestGoldenProducerReplay(t *testing.T) {
	root := testsupport.GoldenDir(t, "perfetto-ipc")
	for _, tc := range []struct {
		capture   string
		conn      int
		flushAcks []uint64
	}{
		{"a_probes", 1, []uint64{1}},
		{"b_track_event", 1, nil},
		{"c_probes_write_into_file", 1, []uint64{1, 2}},
		{"e_probes_sigint", 1, []uint64{1}},
		{"g_sdk_startup_tracing", 2, nil},
		{"h_probes_large_readbuffers", 1, []uint64{1}},
		{"j_probes_three_sources", 1, []uint64{1}},   // three instances, one flush
		{"k_probes_two_sessions", 1, []uint64{1, 2}}, // two sessions, one SMB
	} {
		t.Run(tc.capture, func(t *testing.T) {
			rows := readIndex(t, filepath.Join(root, tc.capture), "producer")
			b := newRecordingBackend()
			h := NewHost(NewProducerPort(b))
			c := pair(t, h)
			defer h.Close()
			var prod *Producer
			methods := map[uint64]string{} // request id → method
			started := map[uint64]bool{}
			replies := 0
			for i, r := range rows {
				if r.conn != tc.conn {
					continue
				}
				g := decodeRaw(t, r.rawFrame)
				if r.c2s {
					fd := -1
					if r.fds > 0 {
						fd = testsupport.SealedMemfd(t, 256<<10)
					}
					methods[g.GetRequestId()] = r.method
					c.sendRaw(r.rawFrame, fd)
					if fd >= 0 {
						unix.Close(fd)
					}
					continue
				}
				if cmd := asyncCommand(t, g, methods); cmd != nil {
					if prod == nil {
						select {
						case prod = <-b.producers:
						case <-time.After(10 * time.Second):
							t.Fatal("no producer connected")
						}
					}
					act(t, prod, cmd, rows[i:], tc.conn, started)
				}
				got := c.recv()
				gotFDs := len(c.fds)
				for fd := c.takeFD(); fd >= 0; fd = c.takeFD() {
					checkSMBFD(t, fd)
				}
				compareReply(t, r, g, got, gotFDs, methods)
				replies++
			}
			if replies < 4 {
				t.Fatalf("only %d replies compared", replies)
			}
			// Everything traced_probes committed reached the backend.
			deadline := time.Now().Add(10 * time.Second)
			for {
				b.mu.Lock()
				acks, bad := append([]uint64(nil), b.flushAcks...), b.badCommit
				b.mu.Unlock()
				if equalU64(acks, tc.flushAcks) || time.Now().After(deadline) {
					if !equalU64(acks, tc.flushAcks) || bad != 0 {
						t.Fatalf("flush acks %v (want %v), %d undecodable commits", acks, tc.flushAcks, bad)
					}
					break
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// asyncCommand returns the GetAsyncCommand command a traced→producer
// frame carries, or nil.
func asyncCommand(t *testing.T, g *Frame, methods map[uint64]string) *GetAsyncCommandResponse {
	rep := g.GetMsgInvokeMethodReply()
	if rep == nil || methods[g.GetRequestId()] != "GetAsyncCommand" {
		return nil
	}
	var cmd GetAsyncCommandResponse
	if err := proto.Unmarshal(rep.GetReplyProto(), &cmd); err != nil {
		t.Fatal(err)
	}
	return &cmd
}

// act makes the call on the producer that made traced send cmd. The SMB
// (setup_tracing with a descriptor) goes out with the first
// SetupDataSource, with the config traced sent; StartDataSource follows
// as traced sends it (j: every setup, then every start).
func act(t *testing.T, p *Producer, cmd *GetAsyncCommandResponse, rest []indexRow, conn int, setUp map[uint64]bool) {
	t.Helper()
	setup := func(id uint64, cfg *DataSourceConfig) {
		if setUp[id] {
			return
		}
		setUp[id] = true
		if err := p.SetupDataSource(id, cfg); err != nil {
			t.Fatal(err)
		}
	}
	switch c := cmd.Cmd.(type) {
	case *GetAsyncCommandResponse_SetupTracing_:
		if rest[0].fds == 0 {
			return // a producer SMB: the port confirms it by itself
		}
		for _, r := range rest[1:] {
			if r.conn != conn || r.c2s {
				continue
			}
			var next GetAsyncCommandResponse
			rep := decodeRaw(t, r.rawFrame).GetMsgInvokeMethodReply()
			if proto.Unmarshal(rep.GetReplyProto(), &next) == nil && next.GetSetupDataSource() != nil {
				setup(next.GetSetupDataSource().GetNewInstanceId(), next.GetSetupDataSource().GetConfig())
				return
			}
		}
		t.Fatal("setup_tracing without a setup_data_source after it")
	case *GetAsyncCommandResponse_SetupDataSource_:
		setup(c.SetupDataSource.GetNewInstanceId(), c.SetupDataSource.GetConfig())
	case *GetAsyncCommandResponse_StartDataSource_:
		p.StartDataSource(c.StartDataSource.GetNewInstanceId(), c.StartDataSource.GetConfig())
	case *GetAsyncCommandResponse_StopDataSource_:
		p.StopDataSource(c.StopDataSource.GetInstanceId())
	case *GetAsyncCommandResponse_Flush_:
		p.Flush(c.Flush.GetDataSourceIds(), c.Flush.GetRequestId(), c.Flush.GetFlags())
	case *GetAsyncCommandResponse_ClearIncrementalState_:
		p.ClearIncrementalState(c.ClearIncrementalState.GetDataSourceIds())
	default:
		t.Fatalf("unexpected command %v", cmd)
	}
}

// checkSMBFD checks a descriptor the port sent is a sealed memfd.
func checkSMBFD(t *testing.T, fd int) {
	t.Helper()
	defer unix.Close(fd)
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&(unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL) != unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL {
		t.Errorf("SMB descriptor seals %#x (%v), want shrink|grow|seal", seals, err)
	}
}

func compareReply(t *testing.T, r indexRow, want, got *Frame, gotFDs int, methods map[uint64]string) {
	t.Helper()
	where := "seq " + strconv.Itoa(r.seq) + " " + r.kind + " " + r.method
	if got.GetRequestId() != want.GetRequestId() {
		t.Fatalf("%s: request id %d, traced %d", where, got.GetRequestId(), want.GetRequestId())
	}
	if gotFDs != r.fds {
		t.Fatalf("%s: %d descriptors, traced sent %d", where, gotFDs, r.fds)
	}
	if w := want.GetMsgBindServiceReply(); w != nil {
		if !proto.Equal(w, got.GetMsgBindServiceReply()) {
			t.Fatalf("%s: bind reply %v, traced %v", where, got, w)
		}
		return
	}
	w, g := want.GetMsgInvokeMethodReply(), got.GetMsgInvokeMethodReply()
	if w == nil || g == nil {
		t.Fatalf("%s: got %v, traced %v", where, got, want)
	}
	if (w.Success == nil) != (g.Success == nil) || w.GetSuccess() != g.GetSuccess() || w.GetHasMore() != g.GetHasMore() {
		t.Fatalf("%s: success %v has_more %v, traced %v %v", where, g.Success, g.GetHasMore(), w.Success, w.GetHasMore())
	}
	switch methods[want.GetRequestId()] {
	case "InitializeConnection":
		var wr, gr InitializeConnectionResponse
		_ = proto.Unmarshal(w.GetReplyProto(), &wr)
		_ = proto.Unmarshal(g.GetReplyProto(), &gr)
		if !proto.Equal(&wr, &gr) {
			t.Fatalf("%s: %v, traced %v", where, &gr, &wr)
		}
	case "GetAsyncCommand":
		var wc, gc GetAsyncCommandResponse
		_ = proto.Unmarshal(w.GetReplyProto(), &wc)
		_ = proto.Unmarshal(g.GetReplyProto(), &gc)
		if !proto.Equal(&wc, &gc) {
			t.Fatalf("%s: command %v, traced %v", where, &gc, &wc)
		}
	default:
		if string(w.GetReplyProto()) != string(g.GetReplyProto()) {
			t.Fatalf("%s: reply %x, traced %x", where, g.GetReplyProto(), w.GetReplyProto())
		}
	}
}
