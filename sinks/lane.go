package sinks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tracepipe/tracepipe/tracefile"
)

// Item is one batch of packets offered to every lane of a session
// (Lane.Offer). Lanes share it read-only and each calls Release when done
// with it; the last Release calls the function set with SetRelease, so
// the producer of items can recycle them without copying packets per
// sink.
type Item struct {
	Packets [][]byte
	// Pass marks the packets (by index, parallel to Packets) that pass
	// every filter: service packets (clock snapshot, trace_config,
	// system_info, sync marker, TraceStats, restore packets). nil = none.
	Pass []bool
	// Stats, when non-nil, asks each lane to append a TraceStats packet
	// after Packets: Stats with the tracepipe sink counters replaced by
	// that lane's own, as they stand after every packet before it.
	Stats     *tracefile.TraceStats
	StatsUID  int32  // the service's uid (trusted_uid of the stats packet)
	StatsTime uint64 // the stats packet's timestamp
	// Flush asks the lane to flush its sink after writing the item.
	Flush bool
	// Final marks the session's last item: it is never dropped for a
	// full queue, and a sink that failed gets one last chance to record
	// its TraceStats (see LastWriter).
	Final bool
	// Peers, with Stats, are the session's sinks that lost data or
	// failed (Lane.PeerStats); each lane's TraceStats lists those other
	// than itself, so that every copy says which other copy is
	// incomplete.
	Peers []tracefile.PeerSinkStats

	refs    atomic.Int32
	release func()
	reply   chan error // a Flush request from outside the fan-out
}

// SetRelease sets what the last Release calls.
func (it *Item) SetRelease(f func()) { it.release = f }

// Hold adds n references (one per lane it is about to be offered to).
func (it *Item) Hold(n int) { it.refs.Add(int32(n)) }

// Release drops one reference.
func (it *Item) Release() {
	if it.refs.Add(-1) == 0 && it.release != nil {
		it.release()
	}
}

// LastWriter is implemented by sinks that can record one last packet,
// the final TraceStats, where an ordinary Write would lose it: after a
// write error the file sink uses the room it keeps in reserve, or cuts
// the file back to its last complete packet; a network sink whose queue
// is at its bound lets that one packet past it. The TraceStats reports
// what the sink lost, so it must be the last thing the sink loses.
type LastWriter interface {
	WriteLast(packet []byte) error
}

// Failer is implemented by sinks that know they failed for good: a file
// sink after a write error it cannot recover from, a network sink whose
// destination cannot be reached (see Link), which may fail outside Write.
// The lane checks it after every item and at Close, and treats a failure
// like a write error (on_error applies).
type Failer interface {
	Failed() error
}

// Lane runs one sink on its own goroutine behind its own bounded queue,
// with the sink's filter and policies (when_full, on_error,
// filter_error): a stalled sink never delays another sink by a packet,
// and its losses are counted as its own. Every method is safe for
// concurrent use.
type Lane struct {
	name, dest string
	sink       Sink
	filter     *Filter
	filterDrop bool
	block      bool
	stopOnErr  bool
	log        *slog.Logger
	onFatal    func(*Lane, error)
	index      int
	failer     Failer // the sink, if it can fail on its own (network sinks)

	q       chan *Item
	abandon chan struct{} // closed when Close gives up
	done    chan struct{} // closed when the goroutine has ended

	// Goroutine state.
	kept    [][]byte
	scratch []byte
	one     [1][]byte

	mu        sync.Mutex // guards everything below
	stats     SinkStats  // the lane's own counters (filter, queue)
	snap      SinkStats  // the sink's Stats() as of the last item written
	closed    bool
	sinkDone  bool // the sink's Close returned: Stats is final
	closeErr  error
	err       error // first write error
	fatalSent bool
	lastLog   time.Time
	quiet     uint64 // errors not logged since lastLog
}

// LaneOptions are the session hooks of a lane.
type LaneOptions struct {
	// Logger receives the lane's warnings (rate-limited: the first error
	// at once, then at most one line per 10 s with the count in between).
	Logger *slog.Logger
	// OnFatal is called once, on the lane's goroutine, when the sink fails
	// and its on_error policy is stop.
	OnFatal func(l *Lane, err error)
	// Index is the sink's position in the session's sinks (sinks[Index]).
	Index int
}

// errorLogPeriod bounds how often one lane logs an error.
const errorLogPeriod = 10 * time.Second

// Open builds the sink cfg describes and runs it in a lane.
func Open(cfg Config, env Env) (*Lane, error) {
	return OpenLane(cfg, env, LaneOptions{Logger: env.Logger})
}

// OpenLane builds the sink cfg describes (Config.Build, then
// Builder.Open) and starts its lane.
func OpenLane(cfg Config, env Env, opts LaneOptions) (*Lane, error) {
	b, err := cfg.Build()
	if err != nil {
		return nil, err
	}
	var f *Filter
	if cfg.Filter != "" {
		if f, err = NewFilter(cfg.Filter); err != nil {
			return nil, err
		}
	}
	dest := env.expand(b.Destination())
	env.KeepGoing = cfg.OnError != OnErrorStop
	sk, err := b.Open(env)
	if err != nil {
		return nil, err
	}
	name := cfg.Name
	if name == "" {
		name = cfg.Type + " " + dest
	}
	return NewLane(sk, LaneConfig{
		Name: name, Destination: dest, Filter: f,
		FilterDrop:  cfg.FilterError != FilterErrorKeep,
		Capacity:    cmp.Or(cfg.QueueCapacity, DefaultQueueFor(cfg.Type)),
		Block:       cfg.WhenFull != WhenFullDrop,
		StopOnError: cfg.OnError == OnErrorStop,
		LaneOptions: opts,
	}), nil
}

// LaneConfig configures NewLane.
type LaneConfig struct {
	Name        string  // for logs ("file out/t.pftrace" by default)
	Destination string  // where the packets go
	Filter      *Filter // nil keeps every packet
	FilterDrop  bool    // drop (true) or keep packets the filter cannot evaluate
	Capacity    int     // queued items; < 1 means DefaultQueueCapacity
	Block       bool    // when_full: block (true) or drop
	StopOnError bool    // on_error: stop
	LaneOptions
}

// NewLane runs sink behind a queue; the lane owns the sink from now on.
func NewLane(sink Sink, c LaneConfig) *Lane {
	if c.Capacity < 1 {
		c.Capacity = DefaultQueueCapacity
	}
	l := &Lane{
		name: c.Name, dest: c.Destination, sink: sink, filter: c.Filter, filterDrop: c.FilterDrop,
		block: c.Block, stopOnErr: c.StopOnError, log: c.Logger, onFatal: c.OnFatal, index: c.Index,
		q:       make(chan *Item, c.Capacity),
		abandon: make(chan struct{}),
		done:    make(chan struct{}),
	}
	l.failer, _ = sink.(Failer)
	if es, ok := sink.(interface{ SetExtraStats(func() SinkStats) }); ok {
		es.SetExtraStats(l.ownStats)
	}
	go l.run()
	return l
}

// ownStats returns the lane's own counters (filter, queue).
func (l *Lane) ownStats() SinkStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

var _ Sink = (*Lane)(nil)

// Name is the lane's label; Destination where its packets go.
func (l *Lane) Name() string        { return l.name }
func (l *Lane) Destination() string { return l.dest }

// Capacity is the number of items the queue holds.
func (l *Lane) Capacity() int { return cap(l.q) }

// Blocks reports whether a full queue makes Offer wait (when_full: block).
func (l *Lane) Blocks() bool { return l.block }

// QueueLen is the number of items waiting.
func (l *Lane) QueueLen() int { return len(l.q) }

// Sink returns the destination sink the lane feeds.
func (l *Lane) Sink() Sink { return l.sink }

// Err returns the sink's first error (a write error, or the failure a
// network sink reported), or nil.
func (l *Lane) Err() error {
	l.mu.Lock()
	err := l.err
	l.mu.Unlock()
	if err == nil && l.failer != nil {
		err = l.failer.Failed()
	}
	return err
}

// StopsOnError reports whether the sink's on_error is stop.
func (l *Lane) StopsOnError() bool { return l.stopOnErr }

// Index is the sink's position in the session's sinks.
func (l *Lane) Index() int { return l.index }

// Outage returns why a network sink's destination is unreachable now,
// or nil (also for sinks that cannot tell).
func (l *Lane) Outage() error {
	if o, ok := l.sink.(interface{ Outage() error }); ok {
		return o.Outage()
	}
	return nil
}

// Network reports whether the sink delivers to a destination that can be
// away (it reports outages: Outage), a relay or nats sink, whose losses
// are known only once it closed.
func (l *Lane) Network() bool {
	_, ok := l.sink.(interface{ Outage() error })
	return ok
}

// PeerStats summarises the sink for the other sinks' TraceStats; ok is
// false when it lost nothing and did not fail (then it is not listed).
func (l *Lane) PeerStats() (p tracefile.PeerSinkStats, ok bool) {
	st, err := l.Snapshot(), l.Err()
	dropped := st.PacketsDroppedQueue + st.PacketsDroppedError
	if dropped == 0 && err == nil {
		return p, false
	}
	p = tracefile.PeerSinkStats{Index: uint64(l.index), Name: l.name, Destination: l.dest,
		PacketsWritten: st.PacketsWritten, PacketsDropped: dropped, Errors: st.Errors, Reconnects: st.Reconnects}
	if err != nil {
		p.Failed, p.Error = 1, err.Error()
	}
	return p, true
}

// Offer queues it (the caller has Hold it for this lane). With when_full
// drop and a full queue the item is dropped and counted, unless it is the
// final one; otherwise Offer waits for room, at most until ctx is done
// (then the item is dropped and counted). It never waits on the sink
// itself.
func (l *Lane) Offer(ctx context.Context, it *Item) {
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		l.drop(it, true)
		return
	}
	select {
	case l.q <- it:
		return
	default:
	}
	if !l.block && !it.Final {
		l.drop(it, false)
		return
	}
	select {
	case l.q <- it:
	case <-ctx.Done():
		l.drop(it, false)
	case <-l.abandon:
		l.drop(it, false)
	}
}

// drop counts an item as lost (queue full, or a closed lane) and
// releases it.
func (l *Lane) drop(it *Item, closed bool) {
	n, b := uint64(len(it.Packets)), countBytes(it.Packets)
	if it.Stats != nil {
		n++
	}
	l.mu.Lock()
	if closed {
		l.stats.PacketsDroppedError += n
		l.stats.BytesDroppedError += b
	} else {
		l.stats.PacketsDroppedQueue += n
		l.stats.BytesDroppedQueue += b
	}
	l.mu.Unlock()
	it.Release()
}

// run is the lane's goroutine.
func (l *Lane) run() {
	defer close(l.done)
	for it := range l.q {
		if it.reply != nil {
			l.control(it)
			continue
		}
		select {
		case <-l.abandon:
			l.drop(it, false)
			continue
		default:
		}
		l.process(it)
		it.Release()
		inner := l.sink.Stats()
		l.mu.Lock()
		l.snap = inner
		l.mu.Unlock()
		l.checkFailed()
	}
}

// checkFailed acts on a failure the sink reported on its own (a network
// sink whose destination cannot be reached): the lane treats it as a
// write error, once, so on_error applies.
func (l *Lane) checkFailed() {
	if l.failer == nil {
		return
	}
	if err := l.failer.Failed(); err != nil {
		l.mu.Lock()
		noted := l.err != nil
		l.mu.Unlock()
		if !noted {
			l.noteErr(err)
		}
	}
}

// Snapshot returns the counters as of the last item the lane wrote,
// without waiting for a sink that is busy writing; once the sink is
// closed, its final counters.
func (l *Lane) Snapshot() SinkStats {
	l.mu.Lock()
	if l.sinkDone { // closed: ask the sink, which counted what Close gave up on
		l.mu.Unlock()
		return l.Stats()
	}
	defer l.mu.Unlock()
	return l.snap.Add(l.stats)
}

// process writes one item: the filtered packets, then the lane's own
// TraceStats, then a flush.
func (l *Lane) process(it *Item) {
	ctx := context.Background()
	packets := it.Packets
	if l.filter != nil {
		packets = l.applyFilter(it)
	}
	if len(packets) > 0 {
		l.noteErr(l.sink.Write(ctx, packets))
	}
	if l.filter != nil {
		clear(l.kept) // do not pin the items' buffers
	}
	if it.Stats != nil {
		l.writeStats(it)
	}
	if it.Flush {
		l.noteErr(l.sink.Flush(ctx))
	}
}

func (l *Lane) applyFilter(it *Item) [][]byte {
	l.kept = l.kept[:0]
	var filtered, fbytes, ferrs uint64
	for i, p := range it.Packets {
		if i < len(it.Pass) && it.Pass[i] {
			l.kept = append(l.kept, p)
			continue
		}
		ok, err := l.filter.Match(p)
		if err != nil {
			ferrs++
			ok = !l.filterDrop
		}
		if ok {
			l.kept = append(l.kept, p)
			continue
		}
		filtered++
		fbytes += uint64(len(p))
	}
	if filtered+ferrs > 0 {
		l.mu.Lock()
		l.stats.PacketsFiltered += filtered
		l.stats.BytesFiltered += fbytes
		l.stats.FilterErrors += ferrs
		l.mu.Unlock()
	}
	return l.kept
}

// writeStats appends the item's TraceStats with this lane's counters as
// they stand now, after every packet before it. sink_packets_written
// counts the stats packet itself (so that in a file ending with it, the
// packets in the file equal the counter); sink_bytes_written does not.
func (l *Lane) writeStats(it *Item) {
	st := l.Stats()
	ts := *it.Stats
	tp := tracefile.TracepipeStats{}
	if it.Stats.Tracepipe != nil {
		tp = *it.Stats.Tracepipe
	}
	setSinkCounters(&tp, st)
	tp.PeerSinks = nil
	for _, p := range it.Peers {
		if p.Index != uint64(l.index) {
			tp.PeerSinks = append(tp.PeerSinks, p)
		}
	}
	ts.Tracepipe = &tp
	l.scratch = tracefile.AppendTraceStatsPacket(l.scratch[:0], &ts, it.StatsUID, it.StatsTime)
	if it.Final {
		if lw, ok := l.sink.(LastWriter); ok {
			l.noteErr(lw.WriteLast(l.scratch))
			return
		}
	}
	l.one[0] = l.scratch
	l.noteErr(l.sink.Write(context.Background(), l.one[:]))
	l.one[0] = nil
}

// noteErr records, logs (rate-limited) and acts on a sink error.
func (l *Lane) noteErr(err error) {
	if err == nil || errors.Is(err, ErrClosed) && l.isClosed() {
		return
	}
	now := time.Now()
	l.mu.Lock()
	first := l.err == nil
	if first {
		l.err = err
	}
	logIt := first || now.Sub(l.lastLog) >= errorLogPeriod
	quiet := l.quiet
	if logIt {
		l.lastLog, l.quiet = now, 0
	} else {
		l.quiet++
	}
	fatal := l.stopOnErr && !l.fatalSent
	if fatal {
		l.fatalSent = true
	}
	l.mu.Unlock()
	if logIt {
		// One message per condition: with on_error: stop, this one also
		// says that the session stops (the service does not repeat it).
		then := ""
		if fatal {
			then = "; stopping the session (on_error: stop)"
		}
		detail := []any{"sink", l.name, "error", err.Error(), "more_errors", quiet, "stops_session", fatal}
		if quiet > 0 {
			LogDetail(l.log, slog.LevelWarn, detail, "sink %s: %v (%d more errors since the last message)%s", l.name, err, quiet, then)
		} else {
			LogDetail(l.log, slog.LevelWarn, detail, "sink %s: %v%s", l.name, err, then)
		}
	}
	if fatal && l.onFatal != nil {
		l.onFatal(l, err)
	}
}

func (l *Lane) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// control answers a Flush request from outside the fan-out.
func (l *Lane) control(it *Item) {
	it.reply <- l.sink.Flush(context.Background())
}

// Write queues a copy of packets (for a lane used alone, as a Sink). The
// fan-out of a session uses Offer, which copies nothing.
func (l *Lane) Write(ctx context.Context, packets [][]byte) error {
	if len(packets) == 0 {
		return nil
	}
	it := &Item{}
	var data []byte
	for _, p := range packets {
		data = append(data, p...)
	}
	off := 0
	for _, p := range packets {
		it.Packets = append(it.Packets, data[off:off+len(p):off+len(p)])
		off += len(p)
	}
	it.Hold(1)
	l.Offer(ctx, it)
	return l.Err()
}

// Flush waits (bounded by ctx) until everything queued before it was
// written, then flushes the sink.
func (l *Lane) Flush(ctx context.Context) error {
	if l.isClosed() {
		return ErrClosed
	}
	it := &Item{reply: make(chan error, 1)}
	select {
	case l.q <- it:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-it.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close writes what is queued, then closes the sink, waiting at most
// until ctx is done; then the rest of the queue is counted as dropped and
// the sink is closed once its current write returns. A second Close
// returns the first's result. No Offer may run concurrently with Close.
func (l *Lane) Close(ctx context.Context) error {
	l.mu.Lock()
	if l.closed {
		err := l.closeErr
		l.mu.Unlock()
		return err
	}
	l.closed = true
	l.mu.Unlock()
	close(l.q)
	var err error
	select {
	case <-l.done:
		err = l.sink.Close(ctx)
		l.mu.Lock()
		l.sinkDone = true
		l.mu.Unlock()
		if err == nil && l.failer != nil {
			// A failure found while closing (nothing acknowledged
			// the last batches): record and log it like any other.
			if ferr := l.failer.Failed(); ferr != nil {
				l.mu.Lock()
				first := l.err == nil
				if first {
					l.err = ferr
				}
				l.mu.Unlock()
				if first {
					Logf(l.log, slog.LevelWarn, "sink %s: %v", l.name, ferr)
				}
			}
		}
	case <-ctx.Done():
		close(l.abandon)
		for it := range l.q { // what the stuck goroutine has not taken
			if it.reply != nil {
				it.reply <- ErrClosed
				continue
			}
			l.drop(it, false)
		}
		go func() {
			<-l.done
			_ = l.sink.Close(context.Background())
		}()
		err = fmt.Errorf("sinks: %s: close gave up with batches pending: %w", l.name, ctx.Err())
	}
	l.mu.Lock()
	l.closeErr = err
	l.mu.Unlock()
	return err
}

// Stats returns the sink's counters plus the lane's (filter, queue).
func (l *Lane) Stats() SinkStats {
	inner := l.sink.Stats()
	l.mu.Lock()
	defer l.mu.Unlock()
	return inner.Add(l.stats)
}
