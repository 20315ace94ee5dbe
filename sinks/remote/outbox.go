package remote

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/tracefile"
)

// Batch is a run of packets in Trace framing (each packet preceded by
// 0x0a varint(len)), numbered from 1 in the order the sink sealed them.
type Batch struct {
	Seq     uint64
	Data    []byte // Trace records, ready to append to a trace file
	Packets uint64 // packets in Data
	Bytes   uint64 // packet bytes in Data, framing excluded
	pinned  bool   // a transport is writing Data; recycle on Release
	acked   bool   // acknowledged while pinned
}

// Limits on batches. MaxBatchData bounds a frame on the wire and so the
// memory a receiver needs per connection.
const (
	DefaultBatchBytes = 256 << 10
	DefaultMaxBatches = 64
	MaxBatchData      = 16 << 20
)

// errTooLarge is returned by Write for a packet larger than a batch may be.
var errTooLarge = errors.New("remote: packet larger than the batch limit, dropped")

// Outbox is the bounded queue of a network sink: Write packs packets into
// the open batch, Seal numbers it and queues it for the transport, Ack
// releases acknowledged batches for reuse. Nothing blocks: when MaxBatches
// batches are unacknowledged (the open one included) new packets are
// dropped and counted in PacketsDroppedQueue. Steady state allocates
// nothing: batch buffers are recycled.
type Outbox struct {
	batchBytes int
	maxBatches int

	mu      sync.Mutex // guards everything below
	open    *Batch
	unacked []*Batch // sealed, Seq ascending and contiguous
	free    []*Batch
	allocd  int
	nextSeq uint64 // Seq of the next batch sealed
	acked   uint64 // highest Seq acknowledged
	closed  bool
	stats   sinks.SinkStats
	notify  chan struct{} // capacity 1: a batch was sealed or acknowledged
}

// NewOutbox returns an outbox sealing batches at batchBytes (0 = default)
// and holding at most maxBatches (0 = default) unacknowledged batches.
func NewOutbox(batchBytes, maxBatches int) *Outbox {
	if batchBytes <= 0 {
		batchBytes = DefaultBatchBytes
	}
	batchBytes = min(batchBytes, MaxBatchData)
	if maxBatches <= 0 {
		maxBatches = DefaultMaxBatches
	}
	return &Outbox{batchBytes: batchBytes, maxBatches: maxBatches, nextSeq: 1, notify: make(chan struct{}, 1)}
}

// Notify is signalled whenever a batch is sealed or acknowledged.
func (o *Outbox) Notify() <-chan struct{} { return o.notify }

func (o *Outbox) signal() {
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

// Write appends packets to the open batch, sealing it whenever it reaches
// the batch size. Packets that find no batch (the queue is at its bound)
// are dropped and counted in PacketsDroppedQueue without an error; a
// packet too large for any batch is an error.
func (o *Outbox) Write(packets [][]byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	var err error
	sealed := false
	for i, p := range packets {
		if o.closed {
			rest := packets[i:]
			o.stats.PacketsDroppedError += uint64(len(rest))
			o.stats.BytesDroppedError += countBytes(rest)
			return sinks.ErrClosed
		}
		if tracefile.RecordSize(len(p)) > MaxBatchData {
			o.stats.PacketsDroppedError++
			o.stats.BytesDroppedError += uint64(len(p))
			o.stats.Errors++
			err = errTooLarge
			continue
		}
		if o.open != nil && len(o.open.Data)+tracefile.RecordSize(len(p)) > MaxBatchData {
			o.sealLocked()
			sealed = true
		}
		if o.open == nil && !o.takeLocked() {
			rest := packets[i:]
			// Dropping at the bound is the policy, not a failure: the
			// counters report it, and Write returns no error.
			o.stats.PacketsDroppedQueue += uint64(len(rest))
			o.stats.BytesDroppedQueue += countBytes(rest)
			break
		}
		b := o.open
		b.Data = tracefile.AppendRecord(b.Data, p)
		b.Packets++
		b.Bytes += uint64(len(p))
		if len(b.Data) >= o.batchBytes {
			o.sealLocked()
			sealed = true
		}
	}
	if sealed {
		o.signal()
	}
	return err
}

// WriteLast appends the session's last packet, its final TraceStats: the
// packet that reports what the bound dropped must not be dropped by it.
// When the queue is at its bound the packet gets one batch beyond it
// (once: nothing follows the final TraceStats), and the batch is sealed.
func (o *Outbox) WriteLast(p []byte) error {
	o.mu.Lock()
	if o.closed {
		o.stats.PacketsDroppedError++
		o.stats.BytesDroppedError += uint64(len(p))
		o.mu.Unlock()
		return sinks.ErrClosed
	}
	if tracefile.RecordSize(len(p)) > MaxBatchData {
		o.mu.Unlock()
		return o.Write([][]byte{p}) // counted and reported as too large
	}
	if o.open != nil && len(o.open.Data)+tracefile.RecordSize(len(p)) > MaxBatchData {
		o.sealLocked()
	}
	if o.open == nil && !o.takeLocked() {
		o.allocd++
		o.open = &Batch{Data: make([]byte, 0, tracefile.RecordSize(len(p)))}
	}
	b := o.open
	b.Data = tracefile.AppendRecord(b.Data, p)
	b.Packets++
	b.Bytes += uint64(len(p))
	o.sealLocked()
	o.mu.Unlock()
	o.signal()
	return nil
}

// takeLocked makes a recycled or new batch the open one, if the bound
// allows.
func (o *Outbox) takeLocked() bool {
	if n := len(o.free); n > 0 {
		o.open = o.free[n-1]
		o.free = o.free[:n-1]
		return true
	}
	if o.allocd == o.maxBatches {
		return false
	}
	o.allocd++
	o.open = &Batch{Data: make([]byte, 0, o.batchBytes+o.batchBytes/8)}
	return true
}

func (o *Outbox) sealLocked() {
	b := o.open
	o.open = nil
	if b == nil {
		return
	}
	b.Seq = o.nextSeq
	o.nextSeq++
	o.unacked = append(o.unacked, b)
}

// Seal queues the open batch, if it holds anything.
func (o *Outbox) Seal() {
	o.mu.Lock()
	if o.open == nil || o.open.Packets == 0 {
		o.mu.Unlock()
		return
	}
	o.sealLocked()
	o.mu.Unlock()
	o.signal()
}

// Next returns the sealed batch numbered seq, pinned so that it is not
// recycled while the transport writes it (call Release), or nil when no
// such batch is queued yet. A seq already acknowledged yields the oldest
// unacknowledged batch instead; check Batch.Seq.
func (o *Outbox) Next(seq uint64) *Batch {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.unacked) == 0 {
		return nil
	}
	first := o.unacked[0].Seq
	if seq < first {
		seq = first
	}
	i := seq - first
	if i >= uint64(len(o.unacked)) {
		return nil
	}
	b := o.unacked[i]
	b.pinned = true
	return b
}

// Release ends the transport's use of b.
func (o *Outbox) Release(b *Batch) {
	o.mu.Lock()
	b.pinned = false
	if b.acked {
		o.recycleLocked(b)
	}
	o.mu.Unlock()
}

func (o *Outbox) recycleLocked(b *Batch) {
	b.acked = false
	b.Data, b.Packets, b.Bytes, b.Seq = b.Data[:0], 0, 0, 0
	o.free = append(o.free, b)
}

// Ack records that every batch up to and including seq is stored at the
// destination. Acknowledgements beyond what was sealed are ignored.
func (o *Outbox) Ack(seq uint64) {
	o.mu.Lock()
	n := 0
	for _, b := range o.unacked {
		if b.Seq > seq {
			break
		}
		o.stats.PacketsWritten += b.Packets
		o.stats.BytesWritten += b.Bytes
		if b.Seq > o.acked {
			o.acked = b.Seq
		}
		if b.pinned {
			b.acked = true
		} else {
			o.recycleLocked(b)
		}
		n++
	}
	if n > 0 {
		k := copy(o.unacked, o.unacked[n:])
		clear(o.unacked[k:])
		o.unacked = o.unacked[:k]
	}
	o.mu.Unlock()
	if n > 0 {
		o.signal()
	}
}

// Sealed is the highest batch number sealed so far (0: none).
func (o *Outbox) Sealed() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.nextSeq - 1
}

// Acked is the highest batch number acknowledged so far.
func (o *Outbox) Acked() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.acked
}

// Pending is the number of sealed batches not yet acknowledged.
func (o *Outbox) Pending() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.unacked)
}

// Depth is the number of batches held: pending plus the open one.
func (o *Outbox) Depth() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(o.unacked)
	if o.open != nil {
		n++
	}
	return n
}

// MaxBatches is the queue bound.
func (o *Outbox) MaxBatches() int { return o.maxBatches }

// Close seals the open batch and refuses further writes.
func (o *Outbox) Close() {
	o.Seal()
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
}

// Shutdown is a sink's Close: it closes the outbox, waits (bounded by ctx
// and timeout) until the destination acknowledged every batch, the
// transport running meanwhile, then calls stop, which must end the
// transport, and counts what is still unacknowledged as dropped. It
// returns how many batches were dropped, 0 when nothing was lost.
func (o *Outbox) Shutdown(ctx context.Context, timeout time.Duration, stop func()) int {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	o.Close()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for o.Pending() > 0 && ctx.Err() == nil {
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	stop()
	n := o.Pending()
	if n > 0 {
		o.Abandon()
	}
	return n
}

// Abandon counts every batch still unacknowledged as dropped (a sink
// whose Close gave up waiting for its destination) and forgets them.
func (o *Outbox) Abandon() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, b := range o.unacked {
		o.stats.PacketsDroppedQueue += b.Packets
		o.stats.BytesDroppedQueue += b.Bytes
	}
	clear(o.unacked)
	o.unacked = o.unacked[:0]
	if o.open != nil {
		o.stats.PacketsDroppedQueue += o.open.Packets
		o.stats.BytesDroppedQueue += o.open.Bytes
		o.open = nil
	}
}

// AddErrors counts failed operations of the transport.
func (o *Outbox) AddErrors(n uint64) {
	o.mu.Lock()
	o.stats.Errors += n
	o.mu.Unlock()
}

// Counters returns the outbox's counters (Stats) and next, the number
// the next batch sealed will have, read together: an acknowledgement of
// batch next or a later one comes from a destination that took packets
// sent after every drop these counters hold (sinks.Link.SetCounters).
func (o *Outbox) Counters() (st sinks.SinkStats, next uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.stats, o.nextSeq
}

// Stats returns the outbox's counters: written = acknowledged.
func (o *Outbox) Stats() sinks.SinkStats {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.stats
}

func countBytes(packets [][]byte) uint64 {
	var n uint64
	for _, p := range packets {
		n += uint64(len(p))
	}
	return n
}
