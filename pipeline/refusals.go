package pipeline

import (
	"fmt"
	"sync"
	"time"
)

// Refusals: requests from outside the session (the Alertmanager webhook,
// triggers, snapshots) that the session turned down. None loses trace
// data, but each is something a user asked for and did not get, so each
// is counted into TraceStats (triggers_refused, snapshots_refused,
// alert_requests_refused), shown in run's summary, and logged: the first
// of a kind at once, then at most one line per refusalLogPeriod with the
// count in between, so that a flood of requests cannot flood the log.

// refusalLogPeriod bounds how often one kind of refusal is logged.
const refusalLogPeriod = 10 * time.Second

// refusalLog rate-limits the log lines of one kind of refusal.
type refusalLog struct {
	mu    sync.Mutex // guards last and quiet
	last  time.Time
	quiet uint64 // refusals not logged since last
}

// note logs msg unless a line of this kind was logged less than
// refusalLogPeriod ago (then it is counted for the next line).
func (r *refusalLog) note(s *Service, msg string) {
	now := time.Now()
	r.mu.Lock()
	if !r.last.IsZero() && now.Sub(r.last) < refusalLogPeriod {
		r.quiet++
		r.mu.Unlock()
		return
	}
	quiet := r.quiet
	r.last, r.quiet = now, 0
	r.mu.Unlock()
	if quiet > 0 {
		msg = fmt.Sprintf("%s (and %d more refused since the last message)", msg, quiet)
	}
	s.logf("%s", msg)
}

// refusals holds the session's refusal logs and the webhook's counter.
type refusals struct {
	alertRequests refusalLog
	triggers      refusalLog
	snapshots     refusalLog
	alertsRefused uint64 // guarded by alertsMu
	alertsMu      sync.Mutex
}

// AlertRequestRefused counts and logs an Alertmanager webhook request
// refused before it reached the session (bad or missing token, malformed
// request). Safe for concurrent use.
func (s *Service) AlertRequestRefused(peer string, status int, why error) {
	s.refused.alertsMu.Lock()
	s.refused.alertsRefused++
	s.refused.alertsMu.Unlock()
	s.refused.alertRequests.note(s, fmt.Sprintf("alertmanager webhook: request from %s refused (%d): %v", peer, status, why))
}

// TriggersRefused logs triggers an outside source asked for that did not
// act (they are counted by ActivateTriggers).
func (s *Service) TriggersRefused(source string, names []string) {
	if len(names) == 0 {
		return
	}
	s.refused.triggers.note(s, fmt.Sprintf("%s: triggers %v refused (unknown name, producer mismatch, skip_probability, max_per_24h or queue full)", source, names))
}

// snapshotRefused logs a refused snapshot (counted by its caller).
func (s *Service) snapshotRefused(trigger string, why error) {
	s.refused.snapshots.note(s, fmt.Sprintf("snapshot for trigger %q refused: %v", trigger, why))
}

// alertRequestsRefused is the webhook's refusal count.
func (s *Service) alertRequestsRefused() uint64 {
	s.refused.alertsMu.Lock()
	defer s.refused.alertsMu.Unlock()
	return s.refused.alertsRefused
}
