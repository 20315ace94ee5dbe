package flightrec

import (
	"math/rand/v2"
	"regexp"
	"sync"
	"sync/atomic"
	"time"
)

// Rule is one trigger of a session's trigger_config, as the matcher
// needs it (the config's TriggerSpec, validated: its regex compiles and
// its probability is within 0..1).
type Rule struct {
	Name              string
	ProducerNameRegex string // "" = any producer; must match the whole name
	StopDelay         time.Duration
	MaxPer24h         uint32  // 0 = unlimited
	SkipProbability   float64 // 0..1
}

// TriggerStats counts what became of the triggers a session received.
type TriggerStats struct {
	Received         uint64 // names activated
	Acted            uint64 // acted (and written as trigger packets)
	Unknown          uint64 // not in trigger_config (or no trigger_config)
	ProducerMismatch uint64 // producer_name_regex did not match
	Skipped          uint64 // skip_probability
	RateLimited      uint64 // max_per_24h
	Dropped          uint64 // acted while the service's queue of actions was full
}

// Matcher decides whether an activated trigger acts, with Perfetto's
// order of checks: known name, producer_name_regex (full match against
// the activating producer's name), skip_probability, max_per_24h. Every
// outcome is counted. Safe for concurrent use: triggers arrive from any
// goroutine (producers, the CLI, signals, HTTP).
type Matcher struct {
	rules []Rule
	re    []*regexp.Regexp // per rule; nil = any producer
	mu    sync.Mutex       // guards rng and fired
	rng   *rand.Rand
	fired map[string][]time.Time
	now   func() time.Time

	received, acted, unknown, mismatch, skipped, limited, dropped atomic.Uint64
}

// NewMatcher returns the matcher of validated rules; seed seeds
// skip_probability's draws (so that tests can reproduce them).
func NewMatcher(rules []Rule, seed uint64) *Matcher {
	m := &Matcher{
		rules: rules,
		fired: map[string][]time.Time{},
		now:   time.Now,
		rng:   rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
	for _, r := range rules {
		var re *regexp.Regexp
		if r.ProducerNameRegex != "" {
			re = regexp.MustCompile("^(?:" + r.ProducerNameRegex + ")$") // validated
		}
		m.re = append(m.re, re)
	}
	return m
}

// Match reports whether trigger name, activated by producer ("" for the
// CLI, a signal or the HTTP endpoint), acts, and its rule when it does.
// It never blocks for long: a lock around the random draw and the 24 h
// window only.
func (m *Matcher) Match(name, producer string) (Rule, bool) {
	m.received.Add(1)
	i := -1
	for j, r := range m.rules {
		if r.Name == name {
			i = j
			break
		}
	}
	if i < 0 {
		m.unknown.Add(1)
		return Rule{}, false
	}
	r := m.rules[i]
	if re := m.re[i]; re != nil && !re.MatchString(producer) {
		m.mismatch.Add(1)
		return Rule{}, false
	}
	if !m.admit(r) {
		return Rule{}, false
	}
	m.acted.Add(1)
	return r, true
}

// CountDropped counts a trigger that acted but found the session's queue
// of actions full.
func (m *Matcher) CountDropped() { m.dropped.Add(1) }

// admit applies skip_probability, then max_per_24h.
func (m *Matcher) admit(sp Rule) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sp.SkipProbability > 0 && m.rng.Float64() < sp.SkipProbability {
		m.skipped.Add(1)
		return false
	}
	if sp.MaxPer24h > 0 {
		now := m.now()
		kept := m.fired[sp.Name][:0]
		for _, at := range m.fired[sp.Name] {
			if now.Sub(at) < 24*time.Hour {
				kept = append(kept, at)
			}
		}
		m.fired[sp.Name] = kept
		if len(kept) >= int(sp.MaxPer24h) {
			m.limited.Add(1)
			return false
		}
		m.fired[sp.Name] = append(kept, now)
	}
	return true
}

// Stats returns the counters so far.
func (m *Matcher) Stats() TriggerStats {
	return TriggerStats{Received: m.received.Load(), Acted: m.acted.Load(), Unknown: m.unknown.Load(),
		ProducerMismatch: m.mismatch.Load(), Skipped: m.skipped.Load(), RateLimited: m.limited.Load(), Dropped: m.dropped.Load()}
}
