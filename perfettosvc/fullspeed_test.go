package perfettosvc

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/internal/loss"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	ipc "github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/smb"
	"github.com/tracepipe/tracepipe/tracefile"
)

// fullSpeedDouble is the overloaded SDK producer of issue 26 in Go: a
// writer goroutine writes packets (some spanning chunks) as fast as it
// can into the real SMB while the IPC goroutine answers the service's
// commands. Like the SDK's IPC thread, it acknowledges a flush without
// touching the writer (a thread-local writer is not the IPC thread's to
// flush); the service scrapes what is still being written.
type fullSpeedDouble struct {
	pd     *perfettoDouble
	policy smb.BufferExhaustedPolicy

	sendMu  sync.Mutex // the writer's commits and the IPC goroutine's calls share the socket
	stop    chan struct{}
	wrote   chan smb.WriterStats
	flushes int
	// sentinels counts the committed chunks holding the writer's drop
	// sentinel, read from the SMB as each commit leaves (the chunk is
	// Complete and the service frees it only after the commit).
	sentinels uint64
}

// countSentinels notes the chunks of cd that end in a drop sentinel.
func (fd *fullSpeedDouble) countSentinels(cd *smb.CommitData) {
	s := fd.pd.mem
	for _, m := range cd.ChunksToMove {
		l := smb.LayoutOf(s.PageBitmap(int(m.Page)))
		cs := l.ChunkSize(s.PageSize())
		off := int(m.Page)*s.PageSize() + smb.PageHeaderSize + int(m.Chunk)*cs
		chunk := s.Bytes()[off : off+cs]
		h := smb.DecodeChunkHeader(chunk)
		if _, _, aborted, _ := smb.ParseFragments(chunk[smb.ChunkHeaderSize:], int(h.Count)); aborted {
			fd.sentinels++
		}
	}
}

func (fd *fullSpeedDouble) invoke(method string, args proto.Message) {
	fd.sendMu.Lock()
	fd.pd.invoke(method, args, true)
	fd.sendMu.Unlock()
}

// writeLoop writes until stop, then closes the writer and reports its
// stats.
func (fd *fullSpeedDouble) writeLoop(w *smb.TraceWriter) {
	sizes := []int{24, 200, 5000, 60, 9000, 12, 700} // 5000 and 9000 span 4 KiB chunks
	body := make([]byte, 9000)
	var pkt []byte // reused: WritePacket copies it into the SMB, and the heap stays the service's to measure
	for i := 0; ; i++ {
		select {
		case <-fd.stop:
			_ = w.Close()
			fd.wrote <- w.Stats()
			return
		default:
		}
		n := sizes[i%len(sizes)]
		binary.LittleEndian.PutUint32(body, 0xd0b1e)
		binary.LittleEndian.PutUint32(body[4:], uint32(i))
		pkt = protowire.AppendTag(pkt[:0], tracefile.FieldForTesting, protowire.BytesType)
		pkt = protowire.AppendBytes(pkt, body[:n])
		if err := w.WritePacket(pkt); err != nil {
			fd.pd.t.Errorf("write %d: %v", i, err)
		}
	}
}

// serve answers GetAsyncCommand until the connection ends.
func (fd *fullSpeedDouble) serve(done chan<- error) {
	pd := fd.pd
	var w *smb.TraceWriter
	for {
		f, fds, err := pd.recv()
		if err != nil {
			for _, x := range fds {
				unix.Close(x)
			}
			done <- nil
			return
		}
		var cmd ipc.GetAsyncCommandResponse
		if f.GetRequestId() != pd.gacRID || proto.Unmarshal(f.GetMsgInvokeMethodReply().GetReplyProto(), &cmd) != nil {
			continue
		}
		switch c := cmd.Cmd.(type) {
		case *ipc.GetAsyncCommandResponse_SetupTracing_:
			if len(fds) != 1 {
				done <- fmt.Errorf("setup_tracing with %d descriptors", len(fds))
				return
			}
			s, err := smb.MapFD(fds[0], int(c.SetupTracing.GetSharedBufferPageSizeKb())*1024)
			if err != nil {
				done <- err
				return
			}
			pd.mem = s
			pd.arb, err = smb.NewArbiter(s, smb.ArbiterOptions{OnCommit: func(cd *smb.CommitData) {
				fd.sendMu.Lock()
				fd.countSentinels(cd)
				pd.commit(cd)
				fd.sendMu.Unlock()
			}})
			if err != nil {
				done <- err
				return
			}
		case *ipc.GetAsyncCommandResponse_StartDataSource_:
			pd.instance = c.StartDataSource.GetNewInstanceId()
			w, err = pd.arb.NewTraceWriter(c.StartDataSource.GetConfig().GetTargetBuffer(), fd.policy)
			if err != nil {
				done <- err
				return
			}
			fd.invoke("RegisterTraceWriter", &ipc.RegisterTraceWriterRequest{TraceWriterId: proto.Uint32(uint32(w.ID())),
				TargetBuffer: c.StartDataSource.GetConfig().TargetBuffer})
			go fd.writeLoop(w)
			fd.invoke("NotifyDataSourceStarted", &ipc.NotifyDataSourceStartedRequest{DataSourceId: proto.Uint64(pd.instance)})
		case *ipc.GetAsyncCommandResponse_Flush_:
			fd.flushes++
			pd.arb.SendFlushAck(c.Flush.GetRequestId())
		case *ipc.GetAsyncCommandResponse_StopDataSource_:
			close(fd.stop)
			st := <-fd.wrote
			fd.wrote <- st
			fd.invoke("UnregisterTraceWriter", &ipc.UnregisterTraceWriterRequest{TraceWriterId: proto.Uint32(uint32(w.ID()))})
			fd.invoke("NotifyDataSourceStopped", &ipc.NotifyDataSourceStoppedRequest{DataSourceId: proto.Uint64(c.StopDataSource.GetInstanceId())})
		}
	}
}

// fullSpeedStreamingConfig is a write_into_file TraceConfig with
// file_write_period_ms 100 (so the service also flushes every 100 ms).
func fullSpeedStreamingConfig(sizeKB, durationMs uint64, name string) []byte {
	return outcomeTraceConfig(sizeKB, 1, durationMs, true, name)
}

// A producer writing at full speed through many flush cycles of a
// streaming session gets no packet flagged WRITER_ABORT unless its writer
// really aborted a packet: the flag means the producer's own drop
// sentinel, never a side effect of the service's flushes or scrapes.
func TestPerfettoFullSpeedProducerNoWriterAbort(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy smb.BufferExhaustedPolicy
	}{{"stall", smb.Stall}, {"drop", smb.Drop}} {
		t.Run(tc.name, func(t *testing.T) {
			prodSock, consSock, reg := perfettoService(t)
			pd := dialDouble(t, prodSock, 0)
			defer pd.close()
			fd := &fullSpeedDouble{pd: pd, policy: tc.policy, stop: make(chan struct{}), wrote: make(chan smb.WriterStats, 1)}
			pd.connect("go-fullspeed", &ipc.DataSourceDescriptor{Name: proto.String("test.perfetto_double"),
				WillNotifyOnStart: proto.Bool(true), WillNotifyOnStop: proto.Bool(true)})
			served := make(chan error, 1)
			go fd.serve(served)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if missing := reg.WaitFor(ctx, []string{"test.perfetto_double"}); len(missing) > 0 {
				t.Fatal(missing)
			}
			out := filepath.Join(t.TempDir(), "out.pftrace")
			f, err := os.OpenFile(out, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			c := dialConsumer(t, consSock)
			defer c.pd.close()
			enable := c.invokeFD("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: fullSpeedStreamingConfig(2048, 1000, "test.perfetto_double")}, int(f.Fd()))
			f.Close()
			var er ipc.EnableTracingResponse
			if r := c.reply(enable); proto.Unmarshal(r.GetReplyProto(), &er) != nil || !er.GetDisabled() || er.Error != nil {
				t.Fatalf("EnableTracing reply %v", &er)
			}
			var ws smb.WriterStats
			select {
			case ws = <-fd.wrote:
			case <-ctx.Done():
				t.Fatal("the writer never stopped")
			}
			pd.close()
			if err := <-served; err != nil {
				t.Fatal(err)
			}
			var aborts, producerPackets int
			var stats tracefile.TraceStats
			for _, p := range tracetest.ReadTrace(t, out) {
				if p.Info.PreviousPacketDropped&loss.WriterAbort != 0 {
					aborts++
				}
				if _, _, body, ok := tracetest.ScriptedID(p.Raw); ok && len(body) >= 4 && binary.LittleEndian.Uint32(body) == 0xd0b1e {
					producerPackets++
				}
				if ts, ok, _ := tracefile.DecodeTraceStatsPacket(p.Raw); ok {
					stats = ts
				}
			}
			var sentinelChunks uint64
			for _, b := range stats.BufferStats {
				sentinelChunks += b.TraceWriterPacketLoss
			}
			fd.sendMu.Lock()
			sentinels := fd.sentinels
			fd.sendMu.Unlock()
			t.Logf("%d producer packets, %d flushes, writer dropped %d packets and wrote %d drop sentinels; %d packets flagged WRITER_ABORT, trace_writer_packet_loss %d",
				producerPackets, fd.flushes, ws.PacketsDropped, sentinels, aborts, sentinelChunks)
			if fd.flushes < 3 || producerPackets == 0 {
				t.Fatalf("%d flushes, %d producer packets: the session did not run through flush cycles", fd.flushes, producerPackets)
			}
			// What the service blames on the writer is what the writer did:
			// each sentinel chunk counted once, whether a flush's scrape or
			// the commit brought it, and at most one flagged packet per
			// sentinel (losses between two reads of a sequence share one).
			if sentinelChunks != sentinels || uint64(aborts) > sentinels {
				t.Fatalf("%d packets flagged WRITER_ABORT and %d sentinel chunks counted by the service; the writer wrote %d sentinels",
					aborts, sentinelChunks, sentinels)
			}
			if tc.policy == smb.Stall && (ws.PacketsDropped != 0 || aborts != 0) {
				t.Fatalf("a stalling writer dropped %d packets, %d flagged WRITER_ABORT", ws.PacketsDropped, aborts)
			}
		})
	}
}
