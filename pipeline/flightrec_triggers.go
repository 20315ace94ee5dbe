package pipeline

import (
	"fmt"
	"regexp"
	"time"

	"github.com/tracepipe/tracepipe/control"
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

// Trigger modes (trigger_config.trigger_mode).
const (
	TriggerModeStart = "start_tracing"
	TriggerModeStop  = "stop_tracing"
	TriggerModeClone = "clone_snapshot"
)

// TriggerConfig is Perfetto's TraceConfig.TriggerConfig.
type TriggerConfig struct {
	Mode     string        `koanf:"trigger_mode"`
	Triggers []TriggerSpec `koanf:"triggers"`
	Timeout  time.Duration `koanf:"trigger_timeout"` // start_tracing / stop_tracing: required
}

// TriggerSpec is one TriggerConfig.Trigger.
type TriggerSpec struct {
	Name              string        `koanf:"name"`
	ProducerNameRegex string        `koanf:"producer_name_regex"` // "" = any producer
	StopDelay         time.Duration `koanf:"stop_delay"`
	MaxPer24h         uint32        `koanf:"max_per_24h"`      // 0 = unlimited
	SkipProbability   float64       `koanf:"skip_probability"` // 0..1
}

// MinRotatePeriod is the shortest rotate_period.
const MinRotatePeriod = time.Second

func (c *Config) checkTriggers(k *checker) {
	if c.UniqueSessionName != "" {
		if err := control.ValidName("session", c.UniqueSessionName); err != nil {
			k.bad("unique_session_name", "%v", err)
		}
	}
	if c.RotatePeriod < 0 || c.RotatePeriod > 0 && c.RotatePeriod < MinRotatePeriod {
		k.bad("rotate_period", "must be 0 (never) or >= %v, got %v", MinRotatePeriod, c.RotatePeriod)
	}
	tc := c.TriggerConfig
	if tc == nil {
		return
	}
	switch tc.Mode {
	case TriggerModeStart, TriggerModeStop:
		if tc.Timeout <= 0 || tc.Timeout > MaxDuration {
			k.bad("trigger_config.trigger_timeout", "required with trigger_mode %s: > 0 and <= 7 days, got %v", tc.Mode, tc.Timeout)
		}
	case TriggerModeClone:
		if tc.Timeout != 0 {
			k.bad("trigger_config.trigger_timeout", "not used with trigger_mode clone_snapshot (the session runs for its duration); remove it")
		}
	case "":
		k.bad("trigger_config.trigger_mode", "required: start_tracing, stop_tracing or clone_snapshot")
	default:
		k.bad("trigger_config.trigger_mode", "%q: want start_tracing, stop_tracing or clone_snapshot", tc.Mode)
	}
	if len(tc.Triggers) == 0 {
		k.bad("trigger_config.triggers", "at least one trigger is required")
	}
	seen := map[string]bool{}
	for i, t := range tc.Triggers {
		p := fmt.Sprintf("trigger_config.triggers[%d]", i)
		if err := control.ValidName("trigger", t.Name); err != nil {
			k.bad(p+".name", "%v", err)
		} else if seen[t.Name] {
			k.bad(p+".name", "%q is defined twice", t.Name)
		}
		seen[t.Name] = true
		if n := len(t.ProducerNameRegex); n > maxRegexLen {
			k.bad(p+".producer_name_regex", "%d bytes, at most %d", n, maxRegexLen)
		} else if t.ProducerNameRegex != "" {
			if _, err := regexp.Compile(t.ProducerNameRegex); err != nil {
				k.bad(p+".producer_name_regex", "%v", err)
			}
		}
		if t.StopDelay < 0 || t.StopDelay > MaxDuration {
			k.bad(p+".stop_delay", "must be >= 0 and <= 7 days, got %v", t.StopDelay)
		}
		if !(t.SkipProbability >= 0 && t.SkipProbability <= 1) {
			k.bad(p+".skip_probability", "must be between 0 and 1, got %v", t.SkipProbability)
		}
	}
}

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
	cfg   *TriggerConfig
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

func (t *triggerState) init(cfg *TriggerConfig, seed uint64) {
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
	case TriggerModeStart, TriggerModeStop:
		tm := time.NewTimer(t.cfg.Timeout)
		t.timers = append(t.timers, tm)
		t.timeoutC = tm.C
	}
	return t.mode() == TriggerModeStart
}

// triggerActed runs on the service goroutine for each trigger that acted.
func (s *Service) triggerActed(a triggerAct) {
	t := &s.trig
	t.pkts = append(t.pkts, a)
	t.remember(a)
	switch t.mode() {
	case TriggerModeStart:
		if t.started || s.phase != phaseRecording {
			return
		}
		t.started = true
		t.timeoutC = nil
		s.startProducers()
		if a.delay > 0 {
			s.armStop(a.delay)
		}
	case TriggerModeStop:
		if t.stopping {
			return
		}
		t.timeoutC = nil
		s.armStop(a.delay)
	case TriggerModeClone:
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
	case t.mode() == TriggerModeStart && !t.started, t.mode() == TriggerModeStop && !t.stopping:
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
