package sinks

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrQueueFull is returned by a queued sink's Write when the batch was
// dropped because the queue was full. The drop is counted in
// SinkStats.PacketsDroppedQueue.
var ErrQueueFull = errors.New("sinks: queue full, batch dropped")

// QueuedSink decouples a possibly slow sink from the caller: Write copies
// the batch into a recycled buffer and returns at once; one goroutine
// feeds the batches to the wrapped sink in order.
type QueuedSink struct {
	next     Sink
	capacity int
	queue    chan *qitem   // FIFO of batches and flush/close markers
	free     chan *qitem   // recycled batch buffers
	abandon  chan struct{} // closed when Close gives up waiting
	done     chan struct{} // closed when the worker has ended
	wctx     context.Context
	cancel   context.CancelFunc

	mu       sync.Mutex // guards everything below
	closed   bool
	allocd   int // batch buffers created (≤ capacity)
	stats    SinkStats
	closeErr error
}

// qitem is a batch of copied packets, or a marker when kind != 0.
type qitem struct {
	kind  int // 0 batch, itemFlush, itemClose
	data  []byte
	lens  []int
	pkts  [][]byte
	ctx   context.Context
	reply chan error
}

const (
	itemFlush = 1
	itemClose = 2
)

var _ Sink = (*QueuedSink)(nil)

// Queued wraps sink with a queue of at most capacity batches (one Write
// call = one batch; capacity < 1 is treated as 1), counting the batch the
// sink is currently writing. When capacity batches are held, Write drops the new batch, counts it and returns
// ErrQueueFull: a slow sink never blocks the caller. Flush waits (bounded
// by its ctx) until every batch queued before it was written, then flushes
// the sink. Close drains the queue and closes the sink, waiting at most
// until ctx is done; batches still queued then are counted as dropped and
// the sink is closed in the background once its current Write returns.
func Queued(sink Sink, capacity int) *QueuedSink {
	if capacity < 1 {
		capacity = 1
	}
	q := &QueuedSink{
		next:     sink,
		capacity: capacity,
		// Room for every batch plus markers from concurrent Flush/Close.
		queue:   make(chan *qitem, capacity+4),
		free:    make(chan *qitem, capacity),
		abandon: make(chan struct{}),
		done:    make(chan struct{}),
	}
	q.wctx, q.cancel = context.WithCancel(context.Background())
	go q.run()
	return q
}

// Write queues a copy of packets, or drops them if the queue is full.
func (q *QueuedSink) Write(ctx context.Context, packets [][]byte) error {
	if len(packets) == 0 {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		q.stats.PacketsDroppedError += uint64(len(packets))
		q.stats.BytesDroppedError += countBytes(packets)
		return ErrClosed
	}
	var it *qitem
	select {
	case it = <-q.free:
	default:
		if q.allocd == q.capacity {
			q.stats.PacketsDroppedQueue += uint64(len(packets))
			q.stats.BytesDroppedQueue += countBytes(packets)
			return ErrQueueFull
		}
		q.allocd++
		it = &qitem{}
	}
	it.data, it.lens = it.data[:0], it.lens[:0]
	for _, p := range packets {
		it.data = append(it.data, p...)
		it.lens = append(it.lens, len(p))
	}
	it.pkts = it.pkts[:0]
	off := 0
	for _, n := range it.lens {
		it.pkts = append(it.pkts, it.data[off:off+n:off+n])
		off += n
	}
	select {
	case q.queue <- it:
		return nil
	default: // only reachable if markers fill the spare slots
		q.free <- it
		q.stats.PacketsDroppedQueue += uint64(len(packets))
		q.stats.BytesDroppedQueue += countBytes(packets)
		return ErrQueueFull
	}
}

// run is the worker: it writes batches in order and answers markers.
func (q *QueuedSink) run() {
	defer close(q.done)
	for {
		select {
		case it := <-q.queue:
			if q.handle(it) {
				return
			}
		case <-q.abandon:
			q.drainAbandoned()
			return
		}
	}
}

// handle processes one item; it reports whether the worker should stop.
func (q *QueuedSink) handle(it *qitem) bool {
	switch it.kind {
	case itemFlush:
		it.reply <- q.next.Flush(it.ctx)
		return false
	case itemClose:
		it.reply <- q.next.Close(it.ctx)
		return true
	}
	select {
	case <-q.abandon:
		q.dropItem(it)
	default:
		if err := q.next.Write(q.wctx, it.pkts); err != nil {
			q.mu.Lock()
			q.stats.Errors++
			q.mu.Unlock()
		}
	}
	q.free <- it
	return false
}

func (q *QueuedSink) dropItem(it *qitem) {
	q.mu.Lock()
	q.stats.PacketsDroppedQueue += uint64(len(it.pkts))
	q.stats.BytesDroppedQueue += uint64(len(it.data))
	q.mu.Unlock()
}

// drainAbandoned counts what is still queued as dropped, answers pending
// markers and closes the sink.
func (q *QueuedSink) drainAbandoned() {
	for {
		select {
		case it := <-q.queue:
			switch it.kind {
			case 0:
				q.dropItem(it)
				q.free <- it
			default:
				it.reply <- fmt.Errorf("sinks: queue: abandoned by Close")
			}
		default:
			_ = q.next.Close(context.Background())
			return
		}
	}
}

// send queues a marker and waits for its reply, both bounded by ctx.
func (q *QueuedSink) send(ctx context.Context, kind int) error {
	it := &qitem{kind: kind, ctx: ctx, reply: make(chan error, 1)}
	select {
	case q.queue <- it:
	case <-ctx.Done():
		return ctx.Err()
	case <-q.done:
		return ErrClosed
	}
	select {
	case err := <-it.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Flush waits until the batches queued before it are written, then
// flushes the wrapped sink.
func (q *QueuedSink) Flush(ctx context.Context) error {
	q.mu.Lock()
	closed := q.closed
	q.mu.Unlock()
	if closed {
		return ErrClosed
	}
	return q.send(ctx, itemFlush)
}

// Close drains the queue into the wrapped sink and closes it, giving up
// when ctx is done (see [Queued]). A second Close returns the first's
// result.
func (q *QueuedSink) Close(ctx context.Context) error {
	q.mu.Lock()
	if q.closed {
		err := q.closeErr
		q.mu.Unlock()
		return err
	}
	q.closed = true
	q.mu.Unlock()
	err := q.send(ctx, itemClose)
	if err != nil && ctx.Err() != nil {
		close(q.abandon)
		q.cancel()
		err = fmt.Errorf("sinks: queue: close gave up with batches pending: %w", err)
	} else {
		<-q.done
		q.cancel()
	}
	q.mu.Lock()
	q.closeErr = err
	q.mu.Unlock()
	return err
}

// Stats returns the wrapped sink's counters plus the queue's drops and
// errors.
func (q *QueuedSink) Stats() SinkStats {
	inner := q.next.Stats()
	q.mu.Lock()
	defer q.mu.Unlock()
	return inner.Add(q.stats)
}
