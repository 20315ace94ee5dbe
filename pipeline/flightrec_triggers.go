package pipeline

import (
	"time"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/flightrec"
)

// Triggers with Perfetto's semantics (reference/service.md §3, TraceConfig
// field 17 trigger_config):
//   - start_tracing: the data sources start only when a trigger acts; the
//     session then records for the trigger's stop_delay (0: until its
//     duration or a stop). No trigger within trigger_timeout ends the
//     session without data (Result.TriggerTimedOut).
//   - stop_tracing: the session records; the first trigger that acts
//     ends it stop_delay later. None within trigger_timeout: no data.
//   - clone_snapshot: the session goes on; each trigger that acts takes a
//     snapshot stop_delay later (flightrec_snapshot.go).
// A trigger is checked in this order: known name, producer_name_regex
// (full match against the activating producer's name), skip_probability,
// max_per_24h; each refusal is counted (flightrec.Matcher). Every trigger
// that acted is written into the trace as a `trigger` packet (46). This
// file is what a trigger that acted does to the session, on its loop.

// TriggerStats counts what became of the triggers a session received.
type TriggerStats = flightrec.TriggerStats

type triggerAct struct {
	name, producer string
	producerUID    int64 // of a Perfetto producer's socket; -1: none (CLI, signal, HTTP, plugin)
	delay          time.Duration
	ts             uint64
}

// CloneTriggerHit is a clone_snapshot trigger that acted, as
// Options.OnCloneTrigger gets it (Perfetto's
// ObservableEvents.CloneTriggerHit).
type CloneTriggerHit struct {
	Trigger, Producer string
	ProducerUID       int64         // the producer socket's uid; -1 when the trigger came from elsewhere
	BootTimeNs        uint64        // when it acted (CLOCK_BOOTTIME)
	Delay             time.Duration // its stop_delay
}

// triggerState is the session's trigger bookkeeping.
type triggerState struct {
	cfg   *config.TriggerConfig
	match *flightrec.Matcher // whether an activated trigger acts; its counters

	acts     chan triggerAct
	pkts     []triggerAct // acted, not yet written (service goroutine)
	history  []triggerAct // every trigger that acted, the last maxTriggerHistory (snapshots carry them)
	started  bool         // start_tracing: a trigger started the sources
	stopping bool         // stop_tracing / start_tracing: the stop is armed
	stopC    <-chan time.Time
	timeoutC <-chan time.Time
	timers   []*time.Timer
	timedOut bool
}

func (t *triggerState) init(cfg *config.TriggerConfig, seed uint64) {
	t.cfg = cfg
	t.acts = make(chan triggerAct, 64)
	var rules []flightrec.Rule
	if cfg != nil {
		for _, sp := range cfg.Triggers {
			rules = append(rules, flightrec.Rule{Name: sp.Name, ProducerNameRegex: sp.ProducerNameRegex,
				StopDelay: sp.StopDelay, MaxPer24h: sp.MaxPer24h, SkipProbability: sp.SkipProbability})
		}
	}
	t.match = flightrec.NewMatcher(rules, seed)
}

func (t *triggerState) mode() string {
	if t.cfg == nil {
		return ""
	}
	return t.cfg.Mode
}

// TriggerNames returns the names of the session's trigger_config
// triggers, in config order (none without a trigger_config). Safe for
// concurrent use: the config does not change while the session runs.
func (s *Service) TriggerNames() []string {
	var out []string
	if s.trig.cfg != nil {
		for _, sp := range s.trig.cfg.Triggers {
			out = append(out, sp.Name)
		}
	}
	return out
}

// ActivateTriggers activates triggers on behalf of producer ("" for the
// CLI, a signal or the HTTP endpoint) and returns the names that acted.
// Safe for concurrent use; it never blocks.
func (s *Service) ActivateTriggers(producer string, names ...string) (acted []string) {
	return s.activateTriggers(producer, -1, names)
}

// activateTriggers is ActivateTriggers with the uid of the producer's
// socket (-1: not a socket peer).
func (s *Service) activateTriggers(producer string, uid int64, names []string) (acted []string) {
	t := &s.trig
	for _, name := range names {
		sp, ok := t.match.Match(name, producer)
		if !ok {
			continue
		}
		select {
		case t.acts <- triggerAct{name: name, producer: producer, producerUID: uid, delay: sp.StopDelay, ts: bootNanos()}:
			acted = append(acted, name)
		default:
			t.match.CountDropped()
		}
	}
	return acted
}

// triggerStart arms the trigger timeout; it reports whether the data
// sources must wait for a trigger (start_tracing).
func (s *Service) triggerStart() (deferStart bool) {
	t := &s.trig
	switch t.mode() {
	case config.TriggerModeStart, config.TriggerModeStop:
		tm := time.NewTimer(t.cfg.Timeout)
		t.timers = append(t.timers, tm)
		t.timeoutC = tm.C
	}
	return t.mode() == config.TriggerModeStart
}

// triggerActed runs on the service goroutine for each trigger that acted.
func (s *Service) triggerActed(a triggerAct) {
	t := &s.trig
	t.pkts = append(t.pkts, a)
	t.remember(a)
	switch t.mode() {
	case config.TriggerModeStart:
		if t.started || s.phase != phaseRecording {
			return
		}
		t.started = true
		t.timeoutC = nil
		s.startProducers()
		if a.delay > 0 {
			s.armStop(a.delay)
		}
	case config.TriggerModeStop:
		if t.stopping {
			return
		}
		t.timeoutC = nil
		s.armStop(a.delay)
	case config.TriggerModeClone:
		if hit := s.opts.OnCloneTrigger; hit != nil {
			h := CloneTriggerHit{Trigger: a.name, Producer: a.producer, ProducerUID: a.producerUID, BootTimeNs: a.ts, Delay: a.delay}
			if a.delay == 0 {
				hit(h)
				return
			}
			tm := time.AfterFunc(a.delay, func() { hit(h) })
			t.timers = append(t.timers, tm)
			return
		}
		req := SnapshotRequest{Trigger: a.name, Producer: a.producer}
		if a.delay == 0 {
			sn := &snapshot{req: req, reply: make(chan SnapshotResult, 1), when: a.ts}
			s.snapRequested(sn)
			return
		}
		tm := time.AfterFunc(a.delay, func() { s.Snapshot(req) })
		t.timers = append(t.timers, tm)
	}
}

func (s *Service) armStop(d time.Duration) {
	t := &s.trig
	t.stopping = true
	tm := time.NewTimer(d)
	t.timers = append(t.timers, tm)
	t.stopC = tm.C
}

// triggerTimedOut ends a session no trigger started or stopped in time:
// it returns no data (Perfetto's behaviour).
func (s *Service) triggerTimedOut() {
	s.trig.timedOut = true
	s.trig.timeoutC = nil
	s.recordingStopped = true
	s.logf("trigger_timeout (%v): no trigger acted; the session ends without data", s.trig.cfg.Timeout)
}

// triggerEnded runs when recording stops for any reason: a start_tracing
// or stop_tracing session that no trigger reached returns no data, as
// when its trigger_timeout fires (the sources may have finished first).
func (s *Service) triggerEnded() {
	t := &s.trig
	for len(t.acts) > 0 { // acted before the end, not yet seen by the loop
		s.triggerActed(<-t.acts)
	}
	switch {
	case t.timedOut:
	case t.mode() == config.TriggerModeStart && !t.started, t.mode() == config.TriggerModeStop && !t.stopping:
		t.timedOut = true
		s.logf("no trigger acted before the session ended; it ends without data (trigger_mode %s)", t.mode())
	}
}

func (t *triggerState) stop() {
	for _, tm := range t.timers {
		tm.Stop()
	}
}

// appendTriggers writes a trigger packet for each trigger that acted.
func (s *Service) appendTriggers(b *batch) {
	for _, a := range s.trig.pkts {
		s.emit(b, appendTriggerPacket(s.servicePacket(), fieldTrigger, a.ts, a.name, a.producer))
	}
	s.trig.pkts = s.trig.pkts[:0]
}

// TriggerStats returns the trigger counters so far.
func (s *Service) TriggerStats() TriggerStats {
	return s.trig.match.Stats()
}
