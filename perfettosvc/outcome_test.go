package perfettosvc

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/transport/perfetto"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	ipc "github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/tracefile"
)

// outcomeTraceConfig is traceConfig with one buffer of sizeKB and the
// given fill_policy (0 leaves it unset).
func outcomeTraceConfig(sizeKB, fillPolicy, durationMs uint64, writeIntoFile bool, names ...string) []byte {
	buf := protowire.AppendTag(nil, 1, protowire.VarintType)
	buf = protowire.AppendVarint(buf, sizeKB)
	if fillPolicy != 0 {
		buf = protowire.AppendTag(buf, 4, protowire.VarintType)
		buf = protowire.AppendVarint(buf, fillPolicy)
	}
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, buf)
	rest := traceConfig(durationMs, writeIntoFile, names...)
	// Drop traceConfig's own buffer (its first field) and keep the rest.
	_, _, n := protowire.ConsumeField(rest)
	return append(b, rest[n:]...)
}

// A session without write_into_file whose ring buffer wrapped many times
// (the overloaded-producer case of issue 26) still ends, as traced's do,
// with a TraceStats packet that counts the overwritten chunks: the
// consumer's ReadBuffers queue was bounded by the buffer sizes, and a full
// buffer's packets (grown by their trusted fields) plus the service's own
// packets went past that bound: the newest packets and the final
// TraceStats were dropped, so the trace said nothing about its losses.
// Now everything a full read returns reaches the consumer.
func TestPerfettoConsumerRingSessionEndsWithTraceStats(t *testing.T) {
	prodSock, consSock, reg := perfettoService(t)
	const packets = 40000 // about 20 times the 64 KiB buffer
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
	enable := c.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: outcomeTraceConfig(64, 1, 300, false, "test.perfetto_double")}, false)
	var er ipc.EnableTracingResponse
	if r := c.reply(enable); !r.GetSuccess() || proto.Unmarshal(r.GetReplyProto(), &er) != nil || er.Error != nil {
		t.Fatalf("EnableTracing reply %v (%v)", r, &er)
	}
	pkts := c.readAll()
	if len(pkts) == 0 {
		t.Fatal("ReadBuffers returned nothing")
	}
	ts, ok, err := tracefile.DecodeTraceStatsPacket(pkts[len(pkts)-1])
	if err != nil || !ok {
		t.Fatalf("the last of %d packets is not TraceStats (%v)", len(pkts), err)
	}
	if len(ts.BufferStats) != 1 || ts.BufferStats[0].ChunksOverwritten == 0 {
		t.Fatalf("TraceStats buffer stats %+v: the ring buffer's overwrites are not counted", ts.BufferStats)
	}
	if tp := ts.Tracepipe; tp == nil || tp.SinkPacketsDropped != 0 {
		t.Fatalf("the consumer's queue dropped packets: %+v", tp)
	}
	if got := countDoublePackets(t, pkts); got == 0 || got >= packets {
		t.Fatalf("%d of %d producer packets read back; a wrapped 64 KiB ring keeps some, not all", got, packets)
	}
}

// EnableTracing with a DISCARD buffer and write_into_file warns where the
// session is created, naming the TraceConfig field and what will happen:
// tracepipe's buffers stop for good once full, where traced's V1 buffer
// kept accepting data once it had been read. The session still runs.
func TestPerfettoConsumerWarnsDiscardWithStreaming(t *testing.T) {
	var logs testsupport.LockedBuffer
	pc := &PerfettoConsumers{Producers: perfetto.NewProducers(), Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	for _, tc := range []struct {
		name      string
		policy    uint64
		streaming bool
		warn      bool
	}{{"discard streaming", 2, true, true}, {"ring streaming", 1, true, false}, {"discard read at the end", 2, false, false}} {
		before := strings.Count(logs.String(), "fill_policy")
		fd := -1
		if tc.streaming {
			f, err := os.Create(filepath.Join(t.TempDir(), "out.pftrace"))
			if err != nil {
				t.Fatal(err)
			}
			fd, err = dupForEnable(int(f.Fd()))
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
		}
		cs, err := pc.EnableTracing(ipc.Peer{PID: 4242}, outcomeTraceConfig(64, tc.policy, 100, tc.streaming, "linux.sys_stats"), fd)
		if err != nil {
			t.Fatalf("%s: EnableTracing: %v", tc.name, err)
		}
		select {
		case <-cs.Done():
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the session never ended", tc.name)
		}
		if err := cs.Err(); err != nil {
			t.Fatalf("%s: session: %v", tc.name, err)
		}
		got := strings.Count(logs.String(), "fill_policy") - before
		if !tc.warn {
			if got != 0 {
				t.Fatalf("%s: unexpected warning in %q", tc.name, logs.String())
			}
			continue
		}
		const want = "perfetto consumer (pid 4242): trace_config.buffers[0].fill_policy: DISCARD with write_into_file: the buffer stops accepting data for good once 64 KiB"
		if got != 1 || !strings.Contains(logs.String(), want) || !strings.Contains(logs.String(), "level=WARN") {
			t.Fatalf("%s: logs %q, want one warning containing %q", tc.name, logs.String(), want)
		}
	}
}

// dupForEnable duplicates fd (EnableTracing takes ownership of the one it gets).
func dupForEnable(fd int) (int, error) { return unix.Dup(fd) }
