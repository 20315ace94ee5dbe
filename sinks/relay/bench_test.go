package relay

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/sinks/remote"
)

// benchBatch is 256 packets of 1 KiB: the size of the pipeline's output
// batches (256 KiB).
func benchBatch() [][]byte {
	batch := make([][]byte, 256)
	for i := range batch {
		batch[i] = testPacket(2, uint64(i), 1024)[:1024]
	}
	return batch
}

// BenchmarkRelayLoopback streams 1 KiB packets to a receiver in another
// process (the test binary re-executed as a server writing trace files)
// over loopback TCP. One op is one packet; the time includes waiting for
// the receiver's acknowledgement of the last batch. The sender waits for
// room in its queue (as the lane's when_full: block would), so nothing is
// dropped: drops/op must read 0.
func BenchmarkRelayLoopback(b *testing.B) {
	addr := freeAddr(b)
	startChild(b, addr, b.TempDir(), false)
	s, err := New(Options{Address: addr, Identity: remote.NewIdentity(0, "bench")})
	if err != nil {
		b.Fatal(err)
	}
	batch := benchBatch()
	ctx := context.Background()
	b.SetBytes(1024)
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n += len(batch) {
		for s.out.Depth() >= s.out.MaxBatches()-1 {
			<-s.out.Notify()
		}
		k := min(len(batch), b.N-n)
		s.Write(ctx, batch[:k])
	}
	s.Flush(ctx)
	for s.out.Pending() > 0 {
		time.Sleep(50 * time.Microsecond)
	}
	b.StopTimer()
	st := s.Stats()
	b.ReportMetric(float64(st.PacketsDropped())/float64(b.N), "drops/op")
	if err := s.Close(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkFileSinkSameWorkload is the file sink on the relay benchmark's
// workload (256 packets of 1 KiB per Write), for the ≥ 50 % comparison.
func BenchmarkFileSinkSameWorkload(b *testing.B) {
	s, err := sinks.NewFile(sinks.FileOptions{Path: filepath.Join(b.TempDir(), "bench.pftrace"), FsyncPeriod: -1})
	if err != nil {
		b.Fatal(err)
	}
	batch := benchBatch()
	ctx := context.Background()
	b.SetBytes(1024)
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n += len(batch) {
		k := min(len(batch), b.N-n)
		if err := s.Write(ctx, batch[:k]); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	s.Close(ctx)
}
