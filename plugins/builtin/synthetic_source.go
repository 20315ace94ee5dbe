package builtin

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/smb"
)

// Synthetic is a running (or not yet started) tracepipe.synthetic
// instance: one goroutine per writer, each writing the packets of its
// SyntheticGenerator.
type Synthetic struct {
	cfg SyntheticConfig

	// Owned by the caller of Start/Flush/ClearIncrementalState/Stop (never
	// concurrent with each other).
	writers []*synthWriter
	// published is writers, for Stats (which may run at any time).
	published atomic.Pointer[[]*synthWriter]
	wg        sync.WaitGroup
	started   bool
	stopped   bool

	// done is closed (once, by doneOnce) when every writer has written
	// MaxPackets TrackEvent packets and flushed, or at Stop.
	done     chan struct{}
	doneOnce sync.Once
	finished atomic.Int32 // writers done

	firer *triggerFirer // the trigger option (synthetic_trigger.go); nil without
}

var _ plugins.DataSource = (*Synthetic)(nil)

// Control bits a writer goroutine checks before every packet.
const (
	ctlClear uint32 = 1 << iota
	ctlFlush
	ctlStop
)

// dropCounter is a PacketWriter that counts the packets it dropped.
type dropCounter interface{ Stats() smb.WriterStats }

// synthWriter is one writer goroutine's state.
type synthWriter struct {
	// ctl holds pending control bits; set by the controller, cleared by the
	// goroutine (atomic).
	ctl atomic.Uint32
	// wake interrupts the goroutine's sleep (capacity 1, never blocks).
	wake chan struct{}
	// flushes holds pending flush requests; the controller posts them before
	// setting ctlFlush.
	flushes chan flushRequest

	// Used only by the goroutine (and read after it exited).
	w         plugins.PacketWriter
	gen       *SyntheticGenerator
	finishErr error
	// drops is w when it counts the packets it dropped (smb.TraceWriter
	// under the drop policy); dropped is the count last seen.
	drops   dropCounter
	dropped uint64

	c counters

	onPacket func(n uint64) // writer 0 with the trigger option: after each packet
}

// NewSynthetic returns an unstarted instance. A zero TrackUUIDBase is
// replaced by a random one unless cfg.DeterministicTimestamps is set; with
// DeterministicTimestamps a zero TimestampBase is replaced by the current
// boot time (ms resolution), so the events are on the real clock.
func NewSynthetic(cfg SyntheticConfig) *Synthetic {
	if cfg.TrackUUIDBase == 0 && !cfg.DeterministicTimestamps {
		// Keep the low 16 bits free for the per-writer offsets.
		cfg.TrackUUIDBase = rand.Uint64()&^0xFFFF | 1<<16
	}
	if cfg.DeterministicTimestamps && cfg.TimestampBase == 0 {
		cfg.TimestampBase = bootNanos() / 1e6 * 1e6
	}
	return &Synthetic{cfg: cfg, done: make(chan struct{})}
}

// Done is closed once the instance has written everything it will ever
// write: when every writer has written MaxPackets TrackEvent packets (and
// flushed), or when Stop returns. With MaxPackets 0 only Stop closes it.
// (This is the plugins.Finite contract.)
func (s *Synthetic) Done() <-chan struct{} { return s.done }

func (s *Synthetic) closeDone() { s.doneOnce.Do(func() { close(s.done) }) }

// Config returns the instance's config (with the TrackUUIDBase it uses).
func (s *Synthetic) Config() SyntheticConfig { return s.cfg }

// Start opens cfg.Writers writers (in writer index order) and starts one
// goroutine per writer.
func (s *Synthetic) Start(h plugins.Host) error {
	if s.started {
		return errors.New("tracepipe.synthetic: already started")
	}
	ws := make([]*synthWriter, s.cfg.Writers)
	for i := range ws {
		w, err := h.NewWriter()
		if err != nil {
			for _, sw := range ws[:i] {
				sw.c.finish(sw.w)
			}
			return fmt.Errorf("tracepipe.synthetic: writer %d: %w", i, err)
		}
		ws[i] = &synthWriter{
			wake:    make(chan struct{}, 1),
			flushes: make(chan flushRequest, 8),
			w:       w,
			gen:     NewSyntheticGenerator(s.cfg, i),
		}
		ws[i].drops, _ = w.(dropCounter)
	}
	if s.firer = newTriggerFirer(s.cfg.trigger, h); s.firer != nil {
		ws[0].onPacket = s.firer.packet
	}
	s.writers, s.started = ws, true
	s.published.Store(&ws)
	for _, sw := range ws {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			sw.run(s.cfg.Rate, func() {
				if s.finished.Add(1) == int32(len(ws)) {
					s.closeDone()
				}
			})
		}()
	}
	return nil
}

// Flush makes every writer goroutine flush its own writer and waits for
// their acks, at most FlushTimeout in all.
func (s *Synthetic) Flush() error {
	if !s.started || s.stopped {
		return nil
	}
	deadline := time.NewTimer(flushTimeout)
	defer deadline.Stop()
	reqs := make([]flushRequest, len(s.writers))
	cs := make([]*counters, len(s.writers))
	var errs []error
	for i, sw := range s.writers {
		cs[i] = &sw.c
		r := newFlushRequest()
		select {
		case sw.flushes <- r:
			reqs[i] = r
		default: // eight earlier flushes are still unanswered
			sw.c.flushTimeouts.Add(1)
			errs = append(errs, fmt.Errorf("writer %d: %w (earlier flushes still pending)", i, ErrFlushTimeout))
		}
		sw.ctl.Or(ctlFlush)
		sw.poke()
	}
	errs = append(errs, awaitAcks(reqs, deadline, cs))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("tracepipe.synthetic: flush: %w", err)
	}
	return nil
}

// ClearIncrementalState makes every writer re-emit its descriptors and
// re-intern names before its next TrackEvent packet. It does not wait.
func (s *Synthetic) ClearIncrementalState() {
	for _, sw := range s.writers {
		sw.ctl.Or(ctlClear)
	}
}

// Stop ends every writer goroutine (each closes or flushes its writer) and
// returns once none of them writes any more.
func (s *Synthetic) Stop() error {
	if !s.started || s.stopped {
		return nil
	}
	s.stopped = true
	s.firer.close()
	for _, sw := range s.writers {
		sw.ctl.Or(ctlStop)
		sw.poke()
	}
	s.wg.Wait()
	s.closeDone()
	var errs []error
	for i, sw := range s.writers {
		if sw.finishErr != nil {
			errs = append(errs, fmt.Errorf("writer %d: %w", i, sw.finishErr))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("tracepipe.synthetic: stop: %w", err)
	}
	return nil
}

// Stats sums the counters of every writer. It may be called at any time,
// from any goroutine.
func (s *Synthetic) Stats() Stats {
	var st Stats
	if ws := s.published.Load(); ws != nil {
		for _, sw := range *ws {
			sw.c.addTo(&st)
		}
	}
	return st
}

func (sw *synthWriter) poke() {
	select {
	case sw.wake <- struct{}{}:
	default:
	}
}

// run is a writer goroutine. Rate limiting is by batch: when the packets
// written so far catch up with the number due since the start, the
// goroutine sleeps until the next one is due, then writes everything that
// became due without looking at the clock again. A writer that fell
// behind (descheduled, or stalled on a full SMB) catches up by at most
// maxCatchUp worth of packets: the schedule slips instead, so the rate
// stays a sustained rate and never turns into a burst of the backlog at
// memory speed (which would overrun a ring buffer sized for the rate).
//
// finished is called once, after the writer has written MaxPackets
// TrackEvent packets and flushed.
// maxCatchUp bounds how far behind schedule a rate-limited writer
// catches up at once (see run).
const maxCatchUp = 10 * time.Millisecond

func (sw *synthWriter) run(rate int64, finished func()) {
	buf := make([]byte, 0, sw.gen.cfg.PacketSize+256)
	var (
		start  time.Time
		n, due uint64 // packets written, packets due at the last look
		timer  *time.Timer
		idle   bool // the generator is done and the writer flushed
	)
	if rate > 0 {
		start = time.Now()
		timer = time.NewTimer(time.Hour)
		defer timer.Stop()
	}
	for {
		if c := sw.ctl.Load(); c != 0 && sw.control(c) {
			return
		}
		if sw.gen.Done() {
			if !idle {
				idle = true
				sw.c.flush(sw.w)
				finished()
			}
			<-sw.wake
			continue
		}
		if rate > 0 && n >= due {
			elapsed := time.Since(start)
			due = uint64(float64(elapsed)*float64(rate)/1e9) + 1
			if burst := max(uint64(float64(rate)*maxCatchUp.Seconds()), 1); due > n+burst {
				slip := time.Duration(float64(due-n-burst) * 1e9 / float64(rate))
				start = start.Add(slip)
				elapsed -= slip
				due = n + burst
			}
			if n >= due {
				// Round up: a packet due at 333333.3 ns must not wake the
				// writer at 333333 ns, when it is not due yet.
				next := time.Duration(math.Ceil(float64(n) * 1e9 / float64(rate)))
				timer.Reset(next - elapsed)
				select {
				case <-sw.wake:
				case <-timer.C:
					// Packet n is due now, whatever the float rounding of
					// elapsed·rate says: without this a clock that does not
					// move between two looks (synctest's) spins here.
					due = n + 1
				}
				continue
			}
		}
		if sw.drops != nil {
			// A dropped packet may have held the CLEARED descriptor or
			// interned names the next ones use: trace_processor would skip
			// the rest of the sequence (SEQ_NEEDS_INCREMENTAL_STATE after a
			// loss). Start the incremental state again, as a clear does.
			if d := sw.drops.Stats().PacketsDropped; d != sw.dropped {
				sw.dropped = d
				sw.gen.ClearIncrementalState()
			}
		}
		buf = sw.gen.Next(buf[:0])
		sw.c.write(sw.w, buf)
		n++
		if sw.onPacket != nil {
			sw.onPacket(n)
		}
		if n%yieldEvery == 0 {
			// An in-process load generator shares the Go scheduler with
			// the service: yield now and then, as a producer in its own
			// process would be time-sliced by the kernel, so that a
			// busy writer cannot starve the goroutine draining the SMB.
			runtime.Gosched()
		}
	}
}

// yieldEvery is how many packets a writer writes between yields.
const yieldEvery = 256

// control handles the pending control bits c and reports whether the
// goroutine must exit.
func (sw *synthWriter) control(c uint32) bool {
	if c&ctlClear != 0 {
		sw.ctl.And(^ctlClear)
		sw.gen.ClearIncrementalState()
	}
	if c&ctlStop != 0 {
		sw.finishErr = sw.c.finish(sw.w)
		sw.answerFlushes(sw.finishErr)
		return true
	}
	if c&ctlFlush != 0 {
		// Clear the bit before taking the requests: a request posted after
		// this point sets the bit again and is handled next time.
		sw.ctl.And(^ctlFlush)
		sw.answerFlushes(sw.c.flush(sw.w))
	}
	return false
}

// answerFlushes acks every posted flush request with err. Every request
// taken here was posted before the flush being acknowledged completed, and
// the goroutine wrote nothing in between.
func (sw *synthWriter) answerFlushes(err error) {
	for {
		select {
		case r := <-sw.flushes:
			r.ack <- err
		default:
			return
		}
	}
}
