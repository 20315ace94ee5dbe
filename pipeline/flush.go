package pipeline

import (
	"time"

	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/tracefile"
)

// pendingFlush is the flush in progress.
type pendingFlush struct {
	id      uint64
	waiting map[*producer]bool
	missed  bool // a live producer was not asked (still busy with an earlier flush)
	timer   *time.Timer
	final   bool // the final flush: its outcome is recorded in s.finalFlushOK
	// requests are the Service.Flush calls answered by this flush.
	requests []*flushRequest
}

func (f *pendingFlush) done() bool { return len(f.waiting) == 0 }

// startFlush asks every live producer to commit what it holds, with the
// reason Perfetto gives: TRACE_STOP for the final flush, else PERIODIC
// (startFlushFlags names another). Only one
// flush runs at a time: a periodic flush due while one is pending is
// skipped. A producer still busy with an earlier flush request (hung in
// its data source's Flush) is not asked again and not waited for: the
// flush then fails, so a hung data source costs at most flush_timeout once
// instead of once per flush.
func (s *Service) startFlush(final bool) bool {
	reason := plugins.FlushReasonPeriodic
	if final {
		reason = plugins.FlushReasonTraceStop
	}
	return s.startFlushFlags(final, plugins.NewFlushFlags(reason, plugins.FlushInitiatorTraced, plugins.FlushCloneTargetUnknown))
}

// startFlushFlags is startFlush with the flags the producers are told.
func (s *Service) startFlushFlags(final bool, flags plugins.FlushFlags) bool {
	if s.flush != nil {
		return false
	}
	s.flushID++
	s.counters.flushesRequested++
	s.event(tracefile.EventFlushStarted)
	f := &pendingFlush{id: s.flushID, waiting: map[*producer]bool{}, timer: time.NewTimer(s.cfg.FlushTimeout), final: final}
	for _, p := range s.producers {
		if !p.state.live() {
			continue
		}
		if p.flushOut == 0 && p.request(ctrlMsg{kind: ctrlFlush, flushID: f.id, flags: flags}) {
			p.flushOut = f.id
			f.waiting[p] = true
		} else {
			f.missed = true
		}
	}
	s.flush = f
	if f.done() {
		s.completeFlush(true)
	}
	return true
}

// flushAcked records a producer's flush acknowledgement (a CommitData
// carrying the flush request id).
func (s *Service) flushAcked(p *producer, id uint64) {
	if p.flushOut != 0 && id >= p.flushOut {
		p.flushOut = 0 // the ack is the last thing a flush call does
	}
	f := s.flush
	if f == nil || id < f.id {
		return
	}
	delete(f.waiting, p)
	if f.done() {
		s.completeFlush(true)
	}
}

// flushGone stops waiting for a producer that will not answer (it died).
func (s *Service) flushGone(p *producer) {
	f := s.flush
	if f == nil || !f.waiting[p] {
		return
	}
	delete(f.waiting, p)
	f.missed = true
	if f.done() {
		s.completeFlush(true)
	}
}

// completeFlush ends the pending flush: the SMBs are scraped so nothing
// still in them is missed, and the outcome is counted.
func (s *Service) completeFlush(ok bool) {
	f := s.flush
	if f == nil {
		return
	}
	s.flush = nil
	f.timer.Stop()
	ok = ok && f.done() && !f.missed
	s.scrape()
	s.event(tracefile.EventAllDataSourcesFlushed)
	if ok {
		s.counters.flushesSucceeded++
	} else {
		s.counters.flushesFailed++
	}
	if f.final {
		s.finalFlushOK = ok
	}
	f.answer(ok)
}

// finalFlush flushes every producer and serves the session (commits
// carry the acknowledgements) until the outcome is known, at most
// flush_timeout after the pending periodic flush ended.
func (s *Service) finalFlush() bool {
	noFlush := func() bool { return s.flush == nil }
	// Let a pending periodic flush end first (bounded by its own timer).
	s.serveUntil(noFlush, nil)
	s.startFlush(true)
	s.serveUntil(noFlush, nil)
	return s.finalFlushOK
}
