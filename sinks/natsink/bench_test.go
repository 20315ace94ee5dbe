package natsink

import (
	"context"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/sinks/remote"
)

// BenchmarkNATSSink publishes 1 KiB packets (256 per Write, 256 KiB
// messages) into a local nats-server's JetStream stream (file storage).
// One op is one packet; the time includes the acknowledgement of the last
// batch. The writer waits for room in the queue, so drops/op must be 0.
func BenchmarkNATSSink(b *testing.B) {
	srv := startNATS(b)
	s, err := New(Options{URL: srv.URL(), Subject: "bench", CreateStream: true, Stream: "BENCH",
		Identity: remote.NewIdentity(0, "bench"), MaxInflight: 32})
	if err != nil {
		b.Fatal(err)
	}
	batch := make([][]byte, 256)
	for i := range batch {
		batch[i] = testPacket(2, uint64(i), 1024)[:1024]
	}
	ctx := context.Background()
	b.SetBytes(1024)
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n += len(batch) {
		for s.out.Depth() >= s.out.MaxBatches()-1 {
			time.Sleep(20 * time.Microsecond)
		}
		s.Write(ctx, batch[:min(len(batch), b.N-n)])
	}
	s.Flush(ctx)
	for s.out.Pending() > 0 {
		time.Sleep(50 * time.Microsecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(s.Stats().PacketsDropped())/float64(b.N), "drops/op")
	if err := s.Close(ctx); err != nil {
		b.Fatal(err)
	}
}
