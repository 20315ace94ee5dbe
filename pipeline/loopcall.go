package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/tracefile"
)

// Calls from other goroutines into the running session (a Perfetto
// consumer's Flush and GetTraceStats): each is a function the service
// goroutine runs between two events of its loop, so that it sees the
// buffers and counters it owns without locks.

// loopCallQueue bounds the calls waiting for the service goroutine;
// more are refused (a consumer cannot pile up work).
const loopCallQueue = 16

// ErrSessionOver is returned for a call into a session whose Run has
// returned (or is about to).
var ErrSessionOver = errors.New("pipeline: the session has ended")

// errLoopBusy is returned when loopCallQueue calls are already waiting.
var errLoopBusy = errors.New("pipeline: too many requests waiting for the session")

// onLoop runs fn on the service goroutine and waits (bounded by ctx and
// by wait) until it ran. fn must not block; it answers through channels
// of its own, buffered, as it may run after onLoop gave up.
func (s *Service) onLoop(ctx context.Context, wait time.Duration, fn func()) error {
	ran := make(chan struct{})
	call := func() { fn(); close(ran) }
	select {
	case s.calls <- call:
	default:
		return errLoopBusy
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ran:
		return nil
	case <-s.finished:
		select {
		case <-ran:
			return nil
		default:
			return ErrSessionOver
		}
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("pipeline: the session did not take the request within %v", wait)
	}
}

// loopCallWait bounds the wait for the service goroutine to take a call;
// it takes one between any two events, so this only fires when the
// session is stuck.
const loopCallWait = 10 * time.Second

// TraceStats returns the session's TraceStats as of now (buffer stats,
// producers, chunks, flushes, losses), computed on the service goroutine
// as the final TraceStats packet is. It fails once the session ended.
func (s *Service) TraceStats(ctx context.Context) (tracefile.TraceStats, error) {
	out := make(chan tracefile.TraceStats, 1)
	if err := s.onLoop(ctx, loopCallWait, func() { out <- s.traceStats() }); err != nil {
		return tracefile.TraceStats{}, err
	}
	return <-out, nil
}

// flushRequest is a flush asked for from outside the service goroutine.
type flushRequest struct {
	timeout time.Duration
	flags   plugins.FlushFlags // what the producers are told (0: PERIODIC, by the service)
	reply   chan error         // buffered: answered once
}

// Flush flushes the running session now, as traced does for a Perfetto
// consumer's Flush: every live data source is asked to commit what it
// holds (a Flush command with a new flush id), and Flush returns nil once
// all acknowledged, or an error when one did not within timeout (0: the
// session's flush_timeout), died, or was still busy with an earlier
// flush. A flush already running when Flush is called does not count: a
// new one starts after it, and after the data sources still starting.
// It fails once the session stopped recording.
func (s *Service) Flush(ctx context.Context, timeout time.Duration) error {
	return s.FlushWithFlags(ctx, timeout, 0)
}

// FlushWithFlags is Flush telling the producers flags (a Perfetto
// consumer's own, which traced passes on); 0: PERIODIC from the service.
func (s *Service) FlushWithFlags(ctx context.Context, timeout time.Duration, flags plugins.FlushFlags) error {
	if timeout <= 0 {
		timeout = s.cfg.FlushTimeout
	}
	fr := &flushRequest{timeout: timeout, flags: flags, reply: make(chan error, 1)}
	if err := s.onLoop(ctx, loopCallWait, func() { s.flushRequested(fr) }); err != nil {
		return err
	}
	// The flush itself is bounded by timeout on the service goroutine;
	// the margin covers a loop busy with one long event.
	t := time.NewTimer(timeout + loopCallWait)
	defer t.Stop()
	select {
	case err := <-fr.reply:
		return err
	case <-s.finished:
		select {
		case err := <-fr.reply:
			return err
		default:
			return ErrSessionOver
		}
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("pipeline: flush not answered within %v", timeout+loopCallWait)
	}
}

// flushRequested queues fr for the next flush (service goroutine).
func (s *Service) flushRequested(fr *flushRequest) {
	if s.phase != phaseRecording {
		fr.reply <- errors.New("pipeline: the session is ending (its final flush is running)")
		return
	}
	s.flushWant = append(s.flushWant, fr)
}

// flushAdvance starts the flush that queued requests wait for, once no
// flush is pending (loopAdvance).
func (s *Service) flushAdvance() {
	if len(s.flushWant) == 0 || s.flush != nil {
		return
	}
	// A data source still starting is flushed once it started (or failed
	// to, bounded by the start timeout): a flush asked right after the
	// session began must reach it, not skip it.
	for _, p := range s.producers {
		if p.state == stateStarting {
			return
		}
	}
	reqs := s.flushWant
	s.flushWant = nil
	if s.phase != phaseRecording {
		for _, fr := range reqs {
			fr.reply <- errors.New("pipeline: the session is ending (its final flush is running)")
		}
		return
	}
	timeout := time.Duration(0)
	for _, fr := range reqs {
		timeout = max(timeout, fr.timeout)
	}
	failed := s.counters.flushesFailed
	if f := reqs[0].flags; f != 0 {
		s.startFlushFlags(false, f) // the first request's reason wins
	} else {
		s.startFlush(false)
	}
	if f := s.flush; f != nil && f.id == s.flushID {
		f.timer.Reset(timeout)
		f.requests = reqs
		return
	}
	// Completed at once (no live data source, or each one busy).
	var err error
	if s.counters.flushesFailed != failed {
		err = errFlushFailed
	}
	for _, fr := range reqs {
		fr.reply <- err
	}
}

var errFlushFailed = errors.New("pipeline: not every data source acknowledged the flush (timed out, died, or busy with an earlier flush)")

// answer replies to the requests waiting for f (service goroutine).
func (f *pendingFlush) answer(ok bool) {
	var err error
	if !ok {
		err = errFlushFailed
	}
	for _, fr := range f.requests {
		fr.reply <- err
	}
	f.requests = nil
}
