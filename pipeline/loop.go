package pipeline

import (
	"fmt"
	"time"

	"github.com/tracepipe/tracepipe/tracefile"
)

// Session phases: periodic flushes and clears run only while recording.
const (
	phaseRecording = iota
	phaseEnding
)

// loopTimers are the session's periodic timers; nil channels never fire.
type loopTimers struct {
	read, flush, clear <-chan time.Time
	rotate             <-chan time.Time // rotate_period (flightrec_rotate.go)
	status             *time.Ticker
	start              *time.Timer // bounds the data sources' Start
	stop               []*time.Ticker
}

func (t *loopTimers) ticker(on bool, period time.Duration) <-chan time.Time {
	if !on || period <= 0 {
		return nil
	}
	tk := time.NewTicker(period)
	t.stop = append(t.stop, tk)
	return tk.C
}

func (t *loopTimers) close() {
	for _, tk := range t.stop {
		tk.Stop()
	}
	t.status.Stop()
	t.start.Stop()
}

// startTimers creates the session's timers (once, in Run).
func (s *Service) startTimers() {
	t := &s.timers
	t.read = t.ticker(s.cfg.WriteIntoFile, s.cfg.FileWritePeriod)
	t.flush = t.ticker(s.cfg.FlushPeriod > 0, s.cfg.FlushPeriod)
	t.clear = t.ticker(s.cfg.IncrementalState.ClearPeriod > 0, s.cfg.IncrementalState.ClearPeriod)
	t.rotate = t.ticker(s.cfg.RotatePeriod > 0, s.cfg.RotatePeriod)
	t.status = time.NewTicker(250 * time.Millisecond)
	t.start = time.NewTimer(startTimeout)
}

// serveUntil is the service's one event loop, used by every phase of the
// session (recording, final flush, stop, drain): it serves commits (and
// the early reads they trigger), producer notes, the read, flush, clear,
// start and status timers, until cond holds (true) or stop fires (false).
// cond is checked before each wait.
func (s *Service) serveUntil(cond func() bool, stop <-chan time.Time) bool {
	for !cond() {
		s.snapAdvance()
		s.loopAdvance()
		var flushTimeout <-chan time.Time
		if s.flush != nil {
			flushTimeout = s.flush.timer.C
		}
		var sinkStop <-chan struct{}
		if !s.sinkStopped {
			sinkStop = s.sinkStop
		}
		// Late joiners (remote.go): only while recording with the data
		// sources started, so that the final flush and the stop see
		// every producer the session started; at most one pass per
		// joinInterval (a change in between waits for a later turn of
		// the loop: the status ticker wakes it at the latest).
		var joinC <-chan struct{}
		if s.joinC != nil && s.phase == phaseRecording && s.started && !s.recordingStopped &&
			time.Since(s.joinedAt) >= joinInterval {
			joinC = s.joinC
		}
		select {
		case <-stop:
			return false
		case <-sinkStop: // a sink with on_error: stop failed: end the session gracefully
			s.sinkStopped = true
			s.recordingStopped = true
		case <-s.stopRecording:
			s.stopRecording = nil // seen once; the phase's cond decides
			s.recordingStopped = true
		case m := <-s.commits:
			s.handleCommit(m)
			// Drain what is already queued before looking at timers,
			// but not past a buffer's early-read mark: a full queue
			// holds as much as a small ring, and copying all of it
			// before reading overwrote data no pass had read.
		drain:
			for n := 0; n < commitQueueLen && !s.readSoon; n++ {
				select {
				case m := <-s.commits:
					s.handleCommit(m)
				default:
					break drain
				}
			}
			if s.readSoon {
				s.readSoon = false
				s.readPass(false, true)
			}
		case n := <-s.notes:
			s.handleNote(n)
		case p := <-s.restartC:
			s.restart(p)
		case <-s.timers.read:
			s.readPass(false, false)
		case <-s.timers.flush:
			if s.phase == phaseRecording {
				s.startFlush(false)
			}
		case <-flushTimeout:
			s.completeFlush(false)
		case <-s.timers.clear:
			if s.phase == phaseRecording {
				for _, p := range s.producers {
					if p.state.live() {
						p.request(ctrlMsg{kind: ctrlClear})
					}
				}
			}
		case <-s.timers.start.C:
			s.startTimedOut()
		case <-s.timers.status.C:
			s.publishStatus()
		case sn := <-s.snap.req:
			s.snapRequested(sn)
		case sn := <-s.snap.mem:
			s.snapAllocated(sn)
		case <-s.snapCopying():
			s.snapStep()
		case sn := <-s.snap.done:
			s.snapFinished(sn, sn.result)
		case <-s.timers.rotate:
			if s.phase == phaseRecording {
				s.rotateFiles()
			}
		case a := <-s.trig.acts:
			s.triggerActed(a)
		case <-s.trig.stopC:
			s.trig.stopC = nil
			s.recordingStopped = true
		case <-s.trig.timeoutC:
			s.triggerTimedOut()
		case fn := <-s.calls:
			fn()
		case <-joinC:
			s.joinLate()
		}
	}
	return true
}

// drain serves what is already queued (commits and notes) and returns.
func (s *Service) drain() {
	s.serveUntil(func() bool { return len(s.commits) == 0 && len(s.notes) == 0 }, nil)
}

// startProducers starts every data source at once, each on its control
// goroutine; their outcomes arrive as notes while the session records.
func (s *Service) startProducers() {
	// The start bound runs from here: a start_tracing session starts its
	// sources when a trigger acts, maybe long after Run armed the timer.
	s.timers.start.Reset(startTimeout)
	if len(s.joinable) > 0 {
		s.joinLate() // producers that registered since New start with the others
	}
	s.started = true
	setupSequenced(s.producers) // setups, then starts, in order
	for _, p := range s.producers {
		p.state = stateStarting
		go p.run()
	}
	if len(s.producers) == 0 {
		s.event(tracefile.EventAllDataSourcesStarted)
	}
}

// handleNote applies what a producer's control goroutine reported.
func (s *Service) handleNote(n note) {
	p := n.p
	switch n.kind {
	case noteStarted:
		if p.state == stateStarting {
			p.state = stateRunning
		}
		s.checkAllStarted()
	case noteStartFailed:
		s.startFailed(p, n.err)
	case noteFlushReturned:
		if p.flushOut == n.flushID {
			p.flushOut = 0
		}
	case noteFinished:
		p.finiteDone = true
	case noteDied:
		if p.state != stateRunning && p.state != stateStarting {
			return // an ordinary end after Stop, or already handled
		}
		p.state = stateDead
		p.dataSourceErrs.Add(1)
		s.counters.producersDied++
		p.faults.died++
		p.faults.err = n.err.Error()
		restarting := s.scheduleRestart(p)
		detail := []any{"data_source", p.source, "index", p.index, "error", n.err.Error(), "restarting", restarting}
		if restarting {
			s.logDetail(detail, "%s: %v; restarting it (what it committed is kept)", p.label(), n.err)
		} else {
			s.logDetail(detail, "%s: %v; the session goes on without it (what it committed is kept)", p.label(), n.err)
		}
		s.flushGone(p)
		// Keep what it completed (the only scrape of its SMB from now
		// on); its control goroutine ends on its own.
		s.scrapeDead(p)
		p.requestStop()
	case noteStopped:
		// A producer that died was reported then; its Stop could only
		// fail on the dead connection.
		if n.err != nil && p.state != stateDead {
			s.logf("%s: stop: %v", p.label(), n.err)
		}
		if p.state == stateStopping || p.state == stateRunning {
			p.state = stateStopped
		}
	}
}

// startFailed records a data source that could not start: the session
// goes on without it unless its on_start_error is abort.
func (s *Service) startFailed(p *producer, err error) {
	if p.state != stateStarting && p.state != stateStopping {
		return
	}
	ending := p.state == stateStopping // the session is stopping anyway
	p.state = stateStartFailed
	p.faults.err = "start: " + err.Error()
	err = fmt.Errorf("%s: %w", p.label(), err)
	s.startErrs = append(s.startErrs, err)
	s.counters.startFailures++
	detail := []any{"data_source", p.source, "index", p.index, "error", err.Error()}
	switch {
	case p.abortOnStartError:
		s.abort = err
	case ending:
		s.logDetail(detail, "%v", err)
	default:
		s.logDetail(detail, "%v; the session goes on without it", err)
	}
	s.checkAllStarted()
}

// startTimedOut fails every data source still starting after startTimeout.
func (s *Service) startTimedOut() {
	for _, p := range s.producers {
		if p.state == stateStarting {
			p.side.Close() // a plugin hung in its handshake or Start
			// An in-process Start that returns after all is stopped then,
			// not left running into an SMB nobody reads.
			p.requestStop()
			s.startFailed(p, fmt.Errorf("did not start within %v", startTimeout))
		}
	}
}

// checkAllStarted emits all_data_sources_started once none is starting.
func (s *Service) checkAllStarted() {
	if s.allStarted {
		return
	}
	for _, p := range s.producers {
		if p.state == stateStarting {
			return
		}
	}
	s.allStarted = true
	s.timers.start.Stop()
	s.event(tracefile.EventAllDataSourcesStarted)
}

// recordingOver reports whether recording should end before its duration:
// a data source failed to start with on_start_error: abort, or no data
// source can write any more: each ended on its own (plugins.Finite),
// failed to start or died.
func (s *Service) recordingOver() bool {
	if s.abort != nil {
		return true
	}
	if len(s.producers) == 0 || s.restartsPending > 0 {
		return false
	}
	for _, p := range s.producers {
		switch {
		case p.state == stateStartFailed || p.state == stateDead:
		case p.finiteDone && p.state == stateRunning:
		default:
			return false
		}
	}
	return true
}
