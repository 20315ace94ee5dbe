package perfettosvc

import (
	"bytes"
	"fmt"
	"net"
	"path/filepath"
	"slices"
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

// goldenSeq names one producer sequence of a capture's trace.
type goldenSeq struct {
	file string // trace file of the capture
	seq  uint32 // trusted_packet_sequence_id in it
}

// TestGoldenSessionReplayShared plays captures j (one traced_probes, three
// data sources in one session, two buffers) and k (one traced_probes
// serving two sessions at once) against tracepipe, both sides: the
// producer's frames to the producer socket, each consumer's to the
// consumer socket, in the capture's order. Every reply is checked against
// traced's: the GetAsyncCommand sequence exactly (every setup before any
// start, instance ids, global target buffers, tracing_session_ids, the
// configs as sent, one SMB descriptor), and each flush's data_source_ids.
//
// The replay plays traced_probes' writers: at each RegisterTraceWriter it
// makes a writer of the same id and target buffer in the SMB, and when a
// flush arrives it writes, into the writers of the flushed instances'
// buffers, the packets of the trace sequences they wrote in the capture;
// the first CommitData traced_probes sent in answer carries those chunks
// (the recorded ones name traced_probes' own SMB layout), the others go
// empty, the acknowledgement carries tracepipe's flush id. Each session's
// ReadBuffers stream then holds, sequence by sequence, exactly the
// producer packets of traced's trace for that session.
//
// k's second session is run without its duration and disabled by its
// consumer just before its flush: otherwise both sessions would end 2 s
// after starts a few milliseconds apart, and which one flushes first
// would be a race (in the capture the second started 0.5 s later).
func TestGoldenSessionReplayShared(t *testing.T) {
	for _, tc := range []struct {
		capture string
		writers []goldenSeq       // by writer id - 1
		traces  map[string]string // consumer connection → its trace file
		// openEnded is the tracing_session_id whose duration is dropped,
		// and openConn its consumer connection (0/"": none).
		openEnded uint64
		openConn  string
	}{
		{"j_probes_three_sources", []goldenSeq{{"trace.pftrace", 2}, {"trace.pftrace", 3}, {"trace.pftrace", 4}},
			map[string]string{"1": "trace.pftrace"}, 0, ""},
		{"k_probes_two_sessions", []goldenSeq{{"trace_1.pftrace", 2}, {"trace_2.pftrace", 2}},
			map[string]string{"1": "trace_1.pftrace", "2": "trace_2.pftrace"}, 2, "2"},
	} {
		t.Run(tc.capture, func(t *testing.T) {
			replaySharedSession(t, tc.capture, tc.writers, tc.traces, tc.openEnded, tc.openConn)
		})
	}
}

// sequenceGroups returns, for the producer packets (sequence > 1) of a
// trace, each sequence's packets stripped of the service's fields and
// joined, sorted: what a trace holds regardless of sequence numbering and
// of how the service interleaves sequences.
func sequenceGroups(t *testing.T, pkts [][]byte) []string {
	t.Helper()
	bySeq := map[uint32][]byte{}
	var order []uint32
	for _, p := range pkts {
		info, err := tracefile.DecodePacket(p)
		if err != nil {
			t.Fatal(err)
		}
		if info.SequenceID <= 1 {
			continue
		}
		if _, ok := bySeq[info.SequenceID]; !ok {
			order = append(order, info.SequenceID)
		}
		s := stripTraced(t, p)
		b := protowire.AppendVarint(bySeq[info.SequenceID], uint64(len(s)))
		bySeq[info.SequenceID] = append(b, s...)
	}
	var out []string
	for _, s := range order {
		out = append(out, string(bySeq[s]))
	}
	slices.Sort(out)
	return out
}

func replaySharedSession(t *testing.T, capture string, writerSeqs []goldenSeq, traces map[string]string, openEnded uint64, openConn string) {
	dir := testsupport.GoldenDir(t, "perfetto-ipc", capture)
	rows := readGoldenConnRows(t, dir, "1")
	// The packets each writer wrote in the capture.
	seqPackets := map[string][][]byte{}
	for _, f := range traces {
		for _, p := range tracetest.ReadTrace(t, filepath.Join(dir, f)) {
			if p.Info.SequenceID > 1 {
				k := fmt.Sprint(f, "/", p.Info.SequenceID)
				seqPackets[k] = append(seqPackets[k], stripTraced(t, p.Raw))
			}
		}
	}

	prodSock, consSock, _ := perfettoService(t)
	dial := func(path string) *perfettoDouble {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		pd := &perfettoDouble{t: t, uc: c.(*net.UnixConn)}
		t.Cleanup(pd.close)
		return pd
	}
	prod := dial(prodSock)
	conss := map[string]*perfettoDouble{}
	methods := map[string]map[uint64]string{"producer": {}}

	var (
		mem       *smb.SMB
		arb       *smb.Arbiter
		gacRID    uint64
		ourFlush  uint64
		pending   smb.CommitData // chunks written at the last flush, not yet committed
		writers   = map[uint32]*smb.TraceWriter{}
		wTarget   = map[uint32]uint32{}   // writer id → target buffer
		iTarget   = map[uint64]uint32{}   // instance id → target buffer
		written   = map[uint32]bool{}     // writers whose packets went into the SMB
		readBack  = map[string][][]byte{} // by consumer connection
		extraRID  = map[string]uint64{}   // our DisableTracing, by consumer connection
		disabled  bool
		readDone  = map[string]bool{} // ReadBuffers streams read to their end
		setupFDs  int
		flushesOK int
	)
	onCommit := func(cd *smb.CommitData) {
		var c smb.CommitData
		if err := c.Unmarshal(cd.AppendMarshal(nil)); err != nil {
			t.Error(err)
			return
		}
		pending.ChunksToMove = append(pending.ChunksToMove, c.ChunksToMove...)
		pending.ChunksToPatch = append(pending.ChunksToPatch, c.ChunksToPatch...)
	}
	// writeFlushed writes the capture's packets of every writer of the
	// flushed instances' buffers, once, and returns their chunks.
	writeFlushed := func(ids []uint64) {
		for id, w := range writers {
			if written[id] || !slices.ContainsFunc(ids, func(i uint64) bool { return iTarget[i] == wTarget[id] }) {
				continue
			}
			written[id] = true
			gs := writerSeqs[id-1]
			pkts := seqPackets[fmt.Sprint(gs.file, "/", gs.seq)]
			if len(pkts) == 0 {
				t.Fatalf("writer %d: no packets on sequence %d of %s", id, gs.seq, gs.file)
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
	}

	for _, r := range rows {
		key := "producer"
		conn := prod
		if !r.producer {
			key = "consumer" + r.conn
			if conss[r.conn] == nil {
				conss[r.conn] = dial(consSock)
				methods[key] = map[uint64]string{}
			}
			conn = conss[r.conn]
		}
		where := fmt.Sprintf("%s seq %d %s %s", capture, r.seq, key, r.method)
		if r.c2s {
			methods[key][r.frame.GetRequestId()] = r.method
			frame := r.raw
			rewrite := func(args []byte) {
				inv := proto.Clone(r.frame).(*ipc.Frame)
				inv.GetMsgInvokeMethod().ArgsProto = args
				var err error
				if frame, err = ipc.AppendFrame(nil, inv); err != nil {
					t.Fatal(err)
				}
			}
			switch {
			case r.method == "GetAsyncCommand":
				gacRID = r.frame.GetRequestId()
			case r.method == "RegisterTraceWriter":
				var rw ipc.RegisterTraceWriterRequest
				if err := proto.Unmarshal(r.frame.GetMsgInvokeMethod().GetArgsProto(), &rw); err != nil || arb == nil {
					t.Fatalf("%s: %v (SMB mapped: %v)", where, err, arb != nil)
				}
				w, err := arb.NewTraceWriter(rw.GetTargetBuffer(), smb.Stall)
				if err != nil || uint32(w.ID()) != rw.GetTraceWriterId() {
					t.Fatalf("%s: replay writer %v %v, traced_probes' is %d", where, w, err, rw.GetTraceWriterId())
				}
				writers[rw.GetTraceWriterId()] = w
				wTarget[rw.GetTraceWriterId()] = rw.GetTargetBuffer()
			case r.method == "CommitData":
				var cd smb.CommitData
				if err := cd.Unmarshal(r.frame.GetMsgInvokeMethod().GetArgsProto()); err != nil {
					t.Fatal(err)
				}
				var ours smb.CommitData
				switch {
				case cd.FlushRequestID != 0:
					ours.FlushRequestID = ourFlush // the flush id is ours, not traced's
				case len(cd.ChunksToMove) > 0 && len(pending.ChunksToMove) > 0:
					ours, pending = pending, smb.CommitData{} // the chunks the replay wrote
				}
				rewrite(ours.AppendMarshal(nil))
			case r.method == "EnableTracing" && r.conn == openConn:
				// The session runs until its consumer disables it.
				var er ipc.EnableTracingRequest
				if err := proto.Unmarshal(r.frame.GetMsgInvokeMethod().GetArgsProto(), &er); err != nil {
					t.Fatal(err)
				}
				er.TraceConfig = dropField(t, er.GetTraceConfig(), 3) // duration_ms
				b, _ := proto.Marshal(&er)
				rewrite(b)
			}
			if _, err := conn.uc.Write(frame); err != nil {
				t.Fatal(err)
			}
			continue
		}

		// A frame from the service, to compare with traced's.
		rkey := fmt.Sprint(key, "/", r.frame.GetRequestId())
		if readDone[rkey] {
			continue // a later reply of a ReadBuffers stream already read
		}
		var got *ipc.Frame
		var fds []int
		for {
			var err error
			if r.producer && !disabled && openConn != "" && methods["producer"][r.frame.GetRequestId()] == "GetAsyncCommand" {
				var wc ipc.GetAsyncCommandResponse
				_ = proto.Unmarshal(r.frame.GetMsgInvokeMethodReply().GetReplyProto(), &wc)
				if f := wc.GetFlush(); f != nil && slices.ContainsFunc(f.GetDataSourceIds(), func(i uint64) bool { return sessionOf(t, rows, i) == openEnded }) {
					// The open-ended session ends now, as it did in the capture.
					disabled = true
					extraRID[openConn] = invokeConsumer(t, conss[openConn], "DisableTracing")
				}
			}
			got, fds, err = conn.recv()
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			if !r.producer && got.GetRequestId() == extraRID[r.conn] && extraRID[r.conn] != 0 {
				if !got.GetMsgInvokeMethodReply().GetSuccess() {
					t.Fatalf("%s: DisableTracing: %v", where, got)
				}
				continue
			}
			if !r.producer || got.GetRequestId() != gacRID {
				break
			}
			var wc, gc ipc.GetAsyncCommandResponse
			_ = proto.Unmarshal(r.frame.GetMsgInvokeMethodReply().GetReplyProto(), &wc)
			_ = proto.Unmarshal(got.GetMsgInvokeMethodReply().GetReplyProto(), &gc)
			if gc.GetFlush() != nil && wc.GetFlush() == nil {
				t.Fatalf("%s: flush %v where traced sent %v", where, &gc, &wc)
			}
			break
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
				ourFlush = f.GetRequestId()
				if !slices.Equal(f.GetDataSourceIds(), wc.GetFlush().GetDataSourceIds()) || ourFlush == 0 {
					t.Fatalf("%s: %v, traced %v", where, &gc, &wc)
				}
				flushesOK++
				writeFlushed(f.GetDataSourceIds())
				break
			}
			for _, cfg := range []*ipc.DataSourceConfig{wc.GetSetupDataSource().GetConfig(), wc.GetStartDataSource().GetConfig()} {
				if cfg != nil && cfg.GetTracingSessionId() == openEnded && openEnded != 0 {
					cfg.TraceDurationMs = proto.Uint32(0) // run without its duration
				}
			}
			if !proto.Equal(&wc, &gc) {
				t.Fatalf("%s: command %v, traced %v", where, &gc, &wc)
			}
			if s := gc.GetSetupDataSource(); s != nil {
				iTarget[s.GetNewInstanceId()] = s.GetConfig().GetTargetBuffer()
			}
			if gc.GetSetupTracing() != nil {
				setupFDs++
				var err error
				if mem, err = smb.MapFD(fds[0], int(gc.GetSetupTracing().GetSharedBufferPageSizeKb())*1024); err != nil {
					t.Fatal(err)
				}
				defer mem.Close()
				if arb, err = smb.NewArbiter(mem, smb.ArbiterOptions{OnCommit: onCommit}); err != nil {
					t.Fatal(err)
				}
				fds = nil
			}
		case "EnableTracing":
			var er ipc.EnableTracingResponse
			if proto.Unmarshal(g.GetReplyProto(), &er) != nil || !er.GetDisabled() || er.Error != nil {
				t.Fatalf("%s: %v", where, &er)
			}
		case "ReadBuffers":
			var cur []byte
			for {
				var rb ipc.ReadBuffersResponse
				if err := proto.Unmarshal(g.GetReplyProto(), &rb); err != nil {
					t.Fatal(err)
				}
				for _, s := range rb.GetSlices() {
					cur = append(cur, s.GetData()...)
					if s.GetLastSliceForPacket() {
						readBack[r.conn] = append(readBack[r.conn], cur)
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
			readDone[rkey] = true
		default:
			if !bytes.Equal(w.GetReplyProto(), g.GetReplyProto()) || w.GetHasMore() != g.GetHasMore() {
				t.Fatalf("%s: %v, traced %v", where, got, r.frame)
			}
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	if setupFDs != 1 || flushesOK != len(traces) {
		t.Fatalf("%d setup_tracing, %d flushes: want one SMB and one flush per session", setupFDs, flushesOK)
	}
	for conn, file := range traces {
		var raw [][]byte
		for _, p := range tracetest.ReadTrace(t, filepath.Join(dir, file)) {
			raw = append(raw, p.Raw)
		}
		want, got := sequenceGroups(t, raw), sequenceGroups(t, readBack[conn])
		if len(want) == 0 || !slices.Equal(want, got) {
			t.Fatalf("consumer %s: %d producer sequences read back, traced's %s has %d; equal: %v", conn, len(got), file, len(want), slices.Equal(want, got))
		}
		t.Logf("%s: consumer %s read %d producer sequences as traced's", capture, conn, len(got))
	}
}

// sessionOf is the tracing_session_id traced gave instance id, from the
// capture's setup_data_source.
func sessionOf(t *testing.T, rows []goldenRow, id uint64) uint64 {
	t.Helper()
	for _, r := range rows {
		rep := r.frame.GetMsgInvokeMethodReply()
		if !r.producer || r.c2s || rep == nil {
			continue
		}
		var c ipc.GetAsyncCommandResponse
		if proto.Unmarshal(rep.GetReplyProto(), &c) == nil && c.GetSetupDataSource().GetNewInstanceId() == id {
			return c.GetSetupDataSource().GetConfig().GetTracingSessionId()
		}
	}
	t.Fatalf("no setup_data_source for instance %d", id)
	return 0
}

// dropField removes every top-level field num from a message's encoding.
func dropField(t *testing.T, b []byte, num protowire.Number) []byte {
	t.Helper()
	var out []byte
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		m := protowire.ConsumeFieldValue(n, typ, b[l:])
		if l < 0 || m < 0 {
			t.Fatalf("malformed message %x", b)
		}
		if n != num {
			out = append(out, b[:l+m]...)
		}
		b = b[l+m:]
	}
	return out
}

// invokeConsumer invokes a ConsumerPort method with empty arguments, with
// a request id far above the capture's.
func invokeConsumer(t *testing.T, c *perfettoDouble, method string) uint64 {
	t.Helper()
	id := slices.Index(ipc.ConsumerPortMethods, method) + 1
	if id == 0 {
		t.Fatalf("no ConsumerPort method %s", method)
	}
	c.rid++
	rid := 1<<20 + c.rid
	f := &ipc.Frame{RequestId: proto.Uint64(rid), Msg: &ipc.Frame_MsgInvokeMethod{MsgInvokeMethod: &ipc.Frame_InvokeMethod{
		ServiceId: proto.Uint32(1), MethodId: proto.Uint32(uint32(id)), ArgsProto: []byte{}, DropReply: proto.Bool(false)}}}
	if err := c.send(f); err != nil {
		t.Fatal(err)
	}
	return rid
}
