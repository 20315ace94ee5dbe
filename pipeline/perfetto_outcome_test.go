package pipeline

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	ipc "github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/tracefile"
)

// sizedTraceConfig is traceConfig with one buffer of sizeKB and the
// given fill_policy (0 leaves it unset).
func sizedTraceConfig(sizeKB, fillPolicy, durationMs uint64, writeIntoFile bool, names ...string) []byte {
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
// consumer's ReadBuffers queue is bounded by the buffer sizes, and a full
// buffer plus the service's own packets used to push the final TraceStats
// past that bound, so the trace said nothing about its losses.
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
	enable := c.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: sizedTraceConfig(64, 1, 300, false, "test.perfetto_double")}, false)
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
	if got := countDoublePackets(t, pkts); got == 0 || got >= packets {
		t.Fatalf("%d of %d producer packets read back; a wrapped 64 KiB ring keeps some, not all", got, packets)
	}
}
