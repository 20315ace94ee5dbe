package pipeline

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tracepipe/tracepipe/buffer"
	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/tracefile"
)

// The fan-out: every sink runs in its own sinks.Lane (goroutine + bounded
// queue + filter + policies). The output goroutine offers each batch to
// every lane without copying it; the batch goes back to the free list
// when the last lane released it. A lane with when_full: drop never holds
// the output goroutine; one with when_full: block does, which makes read
// passes back off (the ring buffer then counts the loss) — producers never
// wait on a sink.

// SinkResult is what one sink did in a session.
type SinkResult struct {
	Name        string   // sinks[i].name, or "<type> <destination>"
	Destination string   // file path, URL, ...
	Files       []string // files written, for file sinks
	Stats       sinks.SinkStats
	Err         error // the sink's first write error, if any
	// StopOnError: its on_error is stop (a failure found only as the
	// session ended could not stop it earlier).
	StopOnError bool
}

// makeBatches fills the free list: the base number of output batches plus
// room for every lane's queue, so that a stalled sink holding a full
// queue never starves the others of batches. The output queue has room
// for all of them: handing a batch over never waits, even while stuck
// sinks hold the output goroutine (read passes back off instead, when
// the free list runs dry).
//
// The batches' packet bytes are one mapping outside the Go heap
// (buffer.Mem), batchMem bytes a batch: a streaming session cycles
// through every batch each pass, and on the heap those bytes (5 MiB with
// a default lane) were most of the live heap, which the collector's goal
// then doubled. A packet that overshoots a batch's share moves that
// batch's bytes to the heap until the batch is recycled (append's own
// growth); the index slices (ends, Packets, Pass) stay on the heap, as
// they must: the collector does not scan the mapping.
func (s *Service) makeBatches() {
	n := outputBatches
	for _, l := range s.lanes {
		n += l.Capacity()
	}
	s.out = make(chan *batch, n)
	s.free = newBatchPool(n)
	mem, err := buffer.NewMem(n * batchMem)
	if err != nil {
		// Out of address space: the heap still works.
		s.logf("output batches on the Go heap: %v", err)
		mem = nil
	}
	s.free.mem = mem
	for i := range n {
		b := &batch{}
		if mem != nil {
			b.owner = mem
			b.mem = mem.Bytes()[i*batchMem : i*batchMem : (i+1)*batchMem]
			b.data = b.mem
		}
		b.SetRelease(func() { s.released(b) })
		s.free.put(b)
	}
}

// batchMem is the mapped share of one batch: its target plus room for
// the packet that takes it over the target (batch sizes are a target,
// not a limit). Pages are resident once written, so the slack costs
// memory only in sessions whose packets use it.
const batchMem = readBatchTarget + 64<<10

// batchPool is the free list of output batches: a stack, so that a read
// pass takes the batch released last. A batch's memory grows to the
// packets it carried and stays with it; with a stack, the batches that
// sinks keeping up need are the same few, and the others keep no memory
// until sinks fall behind (a queue would cycle through, and grow, all of
// them). One goroutine takes (the service's); any may put.
type batchPool struct {
	mu    sync.Mutex
	stack []*batch
	// ready holds a token when a put may have found take waiting.
	ready chan struct{}
	// mem holds the batches' bytes (nil: on the heap). close marks the
	// session over; the mapping goes back to the OS once every batch is
	// back too (a sink that gave up closing may still read one).
	mem    *buffer.Mem
	closed bool
	n      int // batches made (immutable: read without mu)
}

func newBatchPool(n int) *batchPool {
	return &batchPool{stack: make([]*batch, 0, n), ready: make(chan struct{}, 1), n: n}
}

// capacity is the number of batches the pool was made for.
func (p *batchPool) capacity() int { return p.n }

// mapped is the bytes of batch memory mapped now.
func (p *batchPool) mapped() int64 {
	if p == nil || p.mem == nil {
		return 0
	}
	return int64(p.mem.Size())
}

// put returns b to the pool.
func (p *batchPool) put(b *batch) {
	p.mu.Lock()
	p.stack = append(p.stack, b)
	p.releaseIfIdle()
	p.mu.Unlock()
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

// close says that no batch will be taken again: the batches' mapping is
// released now if every batch is back, else by the put of the last one.
func (p *batchPool) close() {
	p.mu.Lock()
	p.closed = true
	p.releaseIfIdle()
	p.mu.Unlock()
}

// releaseIfIdle unmaps the batches' memory once the pool is closed and
// holds every batch (p.mu held).
func (p *batchPool) releaseIfIdle() {
	if !p.closed || p.mem == nil || len(p.stack) < p.n {
		return
	}
	for _, b := range p.stack {
		// Packets too: past its length it still holds slices of the
		// mapping, which the collector would scan once the address range
		// is reused.
		b.mem, b.data, b.Packets, b.owner = nil, nil, nil, nil
	}
	p.mem.Release()
}

// tryTake returns the batch released last, or nil when every batch is
// out.
func (p *batchPool) tryTake() *batch {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.stack)
	if n == 0 {
		return nil
	}
	b := p.stack[n-1]
	p.stack[n-1] = nil
	p.stack = p.stack[:n-1]
	return b
}

// take waits for a batch. REQUIRES: one taking goroutine (a token is
// consumed by the one waiter).
func (p *batchPool) take() *batch {
	for {
		if b := p.tryTake(); b != nil {
			return b
		}
		<-p.ready
	}
}

// released runs when every lane is done with b (on the last lane's
// goroutine): it publishes the pass b ended and recycles b.
func (s *Service) released(b *batch) {
	if b.endOfPass {
		s.outMu.Lock()
		if b.info.Passes > s.outStat.Passes {
			s.outStat = b.info
			if s.opts.OnPassWritten != nil {
				s.opts.OnPassWritten(b.info)
			}
		}
		s.outMu.Unlock()
	}
	b.reset()
	s.free.put(b)
}

// buildSinks opens one lane per configured sink.
func (s *Service) buildSinks() error {
	now := time.Now()
	env := sinks.Env{
		SessionUUID: s.uuidBytes(),
		Now:         now,
		Logger:      s.opts.Logger,
		Rotatable:   s.cfg.RotatePeriod > 0 || s.opts.Rotatable,
	}
	for i, sc := range s.cfg.Sinks {
		if sc.Name == "" {
			sc.Name = fmt.Sprintf("sinks[%d]", i)
		}
		l, err := sinks.OpenLane(sc, env, sinks.LaneOptions{Logger: s.opts.Logger, OnFatal: s.sinkFailed, Index: i})
		if err != nil {
			s.closeSinks()
			return fmt.Errorf("sinks[%d]: %w", i, err)
		}
		s.lanes = append(s.lanes, l)
	}
	return nil
}

// wrappedSinkQueue is the queue of a lane wrapping a sink given by
// Options (a Perfetto consumer's output or read queue), in batches.
//
// As short as a file sink's default (sinks.DefaultFileQueueCapacity):
// these sinks write locally and block rather than drop, so their queue
// needs no room for a network's stalls, and every batch it holds is
// 320 KiB the session keeps resident (a streaming session touches all of
// its batches: a read pass takes free ones until none is left). A read
// pass that finds none waits in the ring, and the next commit over the
// early-read mark (or the next period) resumes it. Measured with the C
// SDK producer and the real perfetto consumer, 3 runs each against a
// queue of 16: peak RSS 97.7 -> 93.9 MiB at 1 KiB events and 100.5 ->
// 95.4 MiB at 200 B, CPU per GB 1.14-1.22 -> 1.04-1.09 and 1.94-2.02 ->
// 1.84-2.07, delivered % up, nothing overwritten in either.
const wrappedSinkQueue = 4

// wrapSinks runs sinks given by Options in lanes that block when full
// (the behaviour of a sink written to directly).
func (s *Service) wrapSinks(sks []sinks.Sink) {
	for i, sk := range sks {
		s.lanes = append(s.lanes, sinks.NewLane(sk, sinks.LaneConfig{
			Name: fmt.Sprintf("sinks[%d]", i), Destination: fmt.Sprintf("%T", sk), Block: true, Capacity: wrappedSinkQueue,
			LaneOptions: sinks.LaneOptions{Logger: s.opts.Logger, Index: i},
		}))
	}
}

// sinkFailed is a lane's OnFatal (on_error: stop): the session stops
// gracefully, so that the other sinks, and this one if it still can, end
// their output cleanly.
func (s *Service) sinkFailed(l *sinks.Lane, err error) {
	s.sinkStopOnce.Do(func() {
		// The lane logged the error and that the session stops; Run
		// returns it.
		s.sinkErr = fmt.Errorf("sink %s failed, session stopped (on_error: stop): %w", l.Name(), err)
		close(s.sinkStop)
	})
}

// output is the output goroutine: it offers each batch to every lane in
// order.
func (s *Service) output() {
	defer close(s.outDone)
	var passes, packets, bytes uint64
	for b := range s.out {
		start := 0
		for _, e := range b.ends {
			b.Packets = append(b.Packets, b.data[start:e])
			start = e
		}
		packets += uint64(len(b.ends))
		bytes += uint64(len(b.data))
		if b.Stats != nil {
			packets++
		}
		if b.endOfPass {
			passes++
			b.Flush = true
		}
		b.Final = b.final
		b.info = PassInfo{Passes: passes, Packets: packets, Bytes: bytes, Final: b.final}
		if b.Stats != nil {
			b.Peers = s.peerStats()
		}
		if b.final && s.offerFinal(b) {
			continue
		}
		b.Hold(len(s.lanes) + 1)
		for _, l := range s.lanes {
			l.Offer(s.outCtx, &b.Item)
		}
		b.Release()
	}
}

// offerFinal offers the session's last batch to the network sinks first
// and closes them, then offers it to the other sinks with the network
// sinks' final outcome in its Peers: whether a remote copy is complete is
// known only once its destination acknowledged the end of the session
// (or did not, within its close_timeout), and the local files must say
// so. It reports false when there is nothing to order (no network sink,
// or nothing but network sinks).
func (s *Service) offerFinal(b *batch) bool {
	var network, local []*sinks.Lane
	for _, l := range s.lanes {
		if l.Network() {
			network = append(network, l)
		} else {
			local = append(local, l)
		}
	}
	if len(network) == 0 || len(local) == 0 {
		return false
	}
	b.Hold(len(network) + 2) // the network lanes, the local copy, this function
	for _, l := range network {
		l.Offer(s.outCtx, &b.Item)
	}
	ctx, cancel := context.WithTimeout(context.Background(), sinkCloseTime)
	var wg sync.WaitGroup
	for _, l := range network {
		wg.Go(func() { _ = l.Close(ctx) }) // closeLanes reports its error
	}
	wg.Wait()
	cancel()
	// A copy of the item: a network lane that gave up closing may still
	// be reading b.Peers.
	it := &sinks.Item{Packets: b.Packets, Pass: b.Pass, Stats: b.Stats, StatsUID: b.StatsUID, StatsTime: b.StatsTime,
		Flush: b.Flush, Final: true, Peers: s.peerStats()}
	it.SetRelease(b.Release)
	it.Hold(len(local))
	for _, l := range local {
		l.Offer(s.outCtx, it)
	}
	b.Release()
	return true
}

// peerStats lists the sinks that lost data or failed so far, for every
// other sink's TraceStats.
func (s *Service) peerStats() []tracefile.PeerSinkStats {
	var out []tracefile.PeerSinkStats
	for _, l := range s.lanes {
		if p, ok := l.PeerStats(); ok {
			out = append(out, p)
		}
	}
	return out
}

// sinkTotals sums the lanes' counters as of their last written batch
// (never waiting on a sink).
func (s *Service) sinkTotals() sinks.SinkStats {
	var st sinks.SinkStats
	for _, l := range s.lanes {
		st = st.Add(l.Snapshot())
	}
	return st
}

// outputTotals returns what every lane has written so far.
func (s *Service) outputTotals() PassInfo {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	return s.outStat
}

// closeLanes closes every lane at once, so that one stuck sink costs the
// session one close timeout, not one per sink.
func (s *Service) closeLanes(ctx context.Context) []error {
	errs := make([]error, len(s.lanes))
	var wg sync.WaitGroup
	for i, l := range s.lanes {
		wg.Go(func() {
			if err := l.Close(ctx); err != nil {
				errs[i] = fmt.Errorf("sinks[%d] (%s): close: %w", i, l.Name(), err)
			}
		})
	}
	wg.Wait()
	return slices.DeleteFunc(errs, func(e error) bool { return e == nil })
}

func (s *Service) closeSinks() {
	ctx, cancel := context.WithTimeout(context.Background(), sinkCloseTime)
	defer cancel()
	for _, l := range s.lanes {
		if err := l.Close(ctx); err != nil {
			s.logf("closing sink %s: %v", l.Name(), err)
		}
	}
}

// sinkFailures lists "name: error" for every lane whose sink failed.
func (s *Service) sinkFailures() []string {
	var out []string
	for _, l := range s.lanes {
		if err := l.Err(); err != nil {
			out = append(out, l.Name()+": "+err.Error())
		}
	}
	return out
}

// sinkResults reports every sink once the lanes are closed.
func (s *Service) sinkResults() []SinkResult {
	out := make([]SinkResult, 0, len(s.lanes))
	for _, l := range s.lanes {
		r := SinkResult{Name: l.Name(), Destination: l.Destination(), Stats: l.Stats(), Err: l.Err(), StopOnError: l.StopsOnError()}
		if f, ok := l.Sink().(interface{ Files() []string }); ok {
			r.Files = f.Files()
		}
		out = append(out, r)
	}
	return out
}

// Files lists the files the service's file sinks have written so far.
func (s *Service) Files() []string {
	var files []string
	for _, l := range s.lanes {
		if f, ok := l.Sink().(interface{ Files() []string }); ok {
			files = append(files, f.Files()...)
		}
	}
	return files
}
