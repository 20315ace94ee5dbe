package pipeline

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/transport/inprocess"
)

// stuckSink stands for a sink on a disk that stopped answering: its
// Write blocks until the test releases it. (A real sink must not block
// indefinitely; this one does on purpose, to show the service does not
// pass the wait on to producers.)
type stuckSink struct {
	release chan struct{}
	entered atomic.Bool // a Write is (or was) blocked
	mu      sync.Mutex
	stats   sinks.SinkStats
}

func (s *stuckSink) Write(_ context.Context, packets [][]byte) error {
	s.entered.Store(true)
	<-s.release
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range packets {
		s.stats.PacketsWritten++
		s.stats.BytesWritten += uint64(len(p))
	}
	return nil
}
func (s *stuckSink) Flush(context.Context) error { <-s.release; return nil }
func (s *stuckSink) Close(context.Context) error { return nil }
func (s *stuckSink) Stats() sinks.SinkStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// A sink that falls behind never blocks producers: while the only sink is
// stuck, the data source still writes all its packets, reads back off, the
// ring buffer wraps over what could not be read, and the loss is counted
// as overwrites. The writer uses the stall policy, so had the stuck sink
// reached it through a stuck service, it would have waited out the 5 s
// stall timeout and dropped packets.
func TestServiceStuckSinkNeverBlocksProducers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := cfgtest.LoadYAML(t, `
write_into_file: true
file_write_period: 100ms
buffers: [{size_kb: 256}]
producers: {smb_size_kb: 1024}
data_sources:
  - name: test.scripted
    buffer_exhausted_policy: stall
    config: {writers: 1, packets: 8000, sizes: [1000]}
sinks: [{type: file, path: unused.pftrace}]
`)
		sink := &stuckSink{release: make(chan struct{})}
		s, err := New(cfg, Options{Sinks: []sinks.Sink{sink}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		type result struct {
			res *Result
			err error
		}
		done := make(chan result, 1)
		go func() {
			res, err := s.Run(ctx)
			done <- result{res, err}
		}()
		// The producer finishes its 8 MB while the sink is stuck.
		src := s.producers[0].side.(*inprocess.Source).DataSource().(*scripted)
		deadline := time.After(30 * time.Second)
		select {
		case <-src.done:
		case <-deadline:
			close(sink.release)
			t.Fatal("the data source was blocked by a stuck sink")
		}
		// The premise: the producer wrote its 8 MB while a Write was stuck.
		// (The first read pass reaches the sink long before 8 MB have gone
		// through a 256 KiB ring: a filling buffer triggers an early read.)
		if !sink.entered.Load() {
			close(sink.release)
			t.Fatal("premise not met: the sink had not been called when the producer finished, so this run proves nothing")
		}
		close(sink.release)
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		st := r.res.Stats
		if st.BufferStats[0].ChunksOverwritten == 0 {
			t.Errorf("8 MB through a 256 KiB ring with a stuck sink overwrote nothing: %+v", st.BufferStats[0])
		}
		if st.Tracepipe.ProducerPacketsDropped != 0 {
			t.Errorf("producer dropped %d packets: the stuck sink reached the producer", st.Tracepipe.ProducerPacketsDropped)
		}
		if sink.Stats().PacketsWritten == 0 {
			t.Error("nothing reached the sink once it was released")
		}
	})
}

// Two stuck sinks hold more batches between them than the output stage's
// own allowance, and still the service never waits to hand a batch over:
// the output queue has room for every batch there is, so a stuck output
// goroutine makes read passes back off instead of stopping the service
// (which would stall the producers).
func TestServiceTwoStuckSinksNeverBlockProducers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := cfgtest.LoadYAML(t, `
write_into_file: true
file_write_period: 100ms
buffers: [{size_kb: 256}]
producers: {smb_size_kb: 1024}
data_sources:
  - name: test.scripted
    buffer_exhausted_policy: stall
    config: {writers: 1, packets: 16000, sizes: [1000]}
sinks: [{type: file, path: unused.pftrace}]
`)
		a, b := &stuckSink{release: make(chan struct{})}, &stuckSink{release: make(chan struct{})}
		s, err := New(cfg, Options{Sinks: []sinks.Sink{a, b}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		type result struct {
			res *Result
			err error
		}
		done := make(chan result, 1)
		go func() {
			res, err := s.Run(ctx)
			done <- result{res, err}
		}()
		release := func() { close(a.release); close(b.release) }
		src := s.producers[0].side.(*inprocess.Source).DataSource().(*scripted)
		select {
		case <-src.done:
		case <-time.After(30 * time.Second):
			release()
			t.Fatal("the data source was blocked by two stuck sinks")
		}
		if !a.entered.Load() {
			release()
			t.Fatal("premise not met: the first sink had not been called when the producer finished")
		}
		release()
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		if d := r.res.Stats.Tracepipe.ProducerPacketsDropped; d != 0 {
			t.Errorf("producer dropped %d packets: the stuck sinks reached the producer", d)
		}
		if r.res.Stats.BufferStats[0].ChunksOverwritten == 0 {
			t.Errorf("16 MB through a 256 KiB ring with stuck sinks overwrote nothing: %+v", r.res.Stats.BufferStats[0])
		}
	})
}

// A Perfetto consumer's sink (given by Options) runs in a short lane:
// wrappedSinkQueue batches, so that the session keeps few batches
// resident. A read pass that runs out of batches waits in the ring, and
// the next commit over the early-read mark resumes it, without waiting
// for file_write_period: 16 MB through a 1 MiB buffer, with a period far
// longer than the session, lose nothing and all arrive.
func TestWrappedSinkShortQueueResumesOnCommits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := cfgtest.LoadYAML(t, `
write_into_file: true
file_write_period: 10m
buffers: [{size_kb: 1024}]
producers: {smb_size_kb: 1024}
data_sources:
  - name: test.scripted
    buffer_exhausted_policy: stall
    config: {writers: 1, packets: 16000, sizes: [1000]}
sinks: [{type: file, path: unused.pftrace}]
`)
		sink := &stuckSink{release: make(chan struct{})}
		close(sink.release) // never stuck: a sink that keeps up
		s, err := New(cfg, Options{Sinks: []sinks.Sink{sink}})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.lanes[0].Capacity(); got != wrappedSinkQueue {
			t.Fatalf("the wrapped sink's lane holds %d batches, want %d", got, wrappedSinkQueue)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := s.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := s.free.capacity(); n != outputBatches+wrappedSinkQueue {
			t.Errorf("%d output batches, want %d", n, outputBatches+wrappedSinkQueue)
		}
		st := res.Stats
		if b := st.BufferStats[0]; b.ChunksOverwritten != 0 || b.BytesOverwritten != 0 || b.ChunksDiscarded != 0 {
			t.Errorf("the buffer lost unread data: %+v", b)
		}
		if got := sink.Stats().PacketsWritten; got < 16000 {
			t.Errorf("the sink got %d packets, want the 16000 written and the service's", got)
		}
	})
}
