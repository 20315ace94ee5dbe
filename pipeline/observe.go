package pipeline

import "context"

// Observing a session's data source instances, as a Perfetto consumer's
// ObserveEvents does: each instance reported when it is started and when
// it is stopped (intermediate states are not reported, as in traced), and
// all_data_sources_started once.

// InstanceState is one data source instance's reported state.
type InstanceState struct {
	Producer   string // the producer's name (a Perfetto producer's own, else "tracepipe")
	DataSource string
	Started    bool // false: stopped (or failed to start, or died)
}

// Observation is what changed since the observer's last call.
type Observation struct {
	Changes    []InstanceState
	AllStarted bool // every data source started (sent once)
}

type observer struct {
	fn         func(Observation)
	reported   map[*producer]int8 // 0: nothing yet, 1: started, -1: stopped
	allStarted bool
}

// Observe registers fn, called on the service goroutine (it must not
// block) first with the states as of now, then with each change, until
// the session ends or cancel is called. It fails once the session ended.
func (s *Service) Observe(ctx context.Context, fn func(Observation)) (cancel func(), err error) {
	o := &observer{fn: fn, reported: map[*producer]int8{}}
	if err := s.onLoop(ctx, loopCallWait, func() { s.observers = append(s.observers, o); s.observe(o) }); err != nil {
		return nil, err
	}
	return func() {
		_ = s.onLoop(context.Background(), loopCallWait, func() {
			for i, x := range s.observers {
				if x == o {
					s.observers = append(s.observers[:i], s.observers[i+1:]...)
					return
				}
			}
		})
	}, nil
}

// loopAdvance runs before each wait of the service loop: it starts the
// flushes callers asked for and tells observers what changed.
func (s *Service) loopAdvance() {
	s.flushAdvance()
	for _, o := range s.observers {
		s.observe(o)
	}
}

// ObserveEnd tells the observers that every instance stopped, once Run
// returned (the caller of Run calls it: no goroutine of the session runs
// any more).
func (s *Service) ObserveEnd() {
	for _, o := range s.observers {
		s.observeState(o, true)
	}
	s.observers = nil
}

// observe sends o what changed since its last call, if anything.
func (s *Service) observe(o *observer) { s.observeState(o, false) }

func (s *Service) observeState(o *observer, ended bool) {
	var ob Observation
	for _, p := range s.producers {
		var st int8
		switch {
		case ended:
			st = -1
		case p.state == stateRunning:
			st = 1
		case p.state == stateStopped || p.state == stateDead || p.state == stateStartFailed:
			st = -1
		}
		if st == 0 || o.reported[p] == st {
			continue
		}
		o.reported[p] = st
		ob.Changes = append(ob.Changes, InstanceState{Producer: p.producerName(), DataSource: p.name, Started: st > 0})
	}
	if s.allStarted && !o.allStarted {
		o.allStarted = true
		ob.AllStarted = true
	}
	if len(ob.Changes) > 0 || ob.AllStarted {
		o.fn(ob)
	}
}

// producerName is the name Perfetto's consumers see for p's producer.
func (p *producer) producerName() string {
	if p.remote != nil {
		return p.remote.Name
	}
	return "tracepipe"
}
