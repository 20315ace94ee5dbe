package pipeline

import (
	"fmt"
	"time"
)

// stopProducers asks every producer whose data source runs to stop (each
// on its own control goroutine, all at once, without blocking) and serves
// the session — commits, early reads, status — until all have stopped or
// stopTimeout passed. A producer that did not stop by then is counted and
// its plugin process, if any, is killed: its SMB is scraped as it is.
func (s *Service) stopProducers() {
	starting := map[*producer]bool{} // Start had not returned at stop
	stopSequenced(s.producers)       // in order, as traced
	for _, p := range s.producers {
		switch p.state {
		case stateRunning, stateStarting:
			starting[p] = p.state == stateStarting
			p.state = stateStopping
			p.requestStop()
		}
	}
	stopping := func() bool {
		for _, p := range s.producers {
			if p.state == stateStopping {
				return false
			}
		}
		return true
	}
	deadline := time.NewTimer(stopTimeout)
	defer deadline.Stop()
	if s.serveUntil(stopping, deadline.C) {
		return
	}
	for _, p := range s.producers {
		if p.state != stateStopping {
			continue
		}
		if starting[p] {
			// Its Stop waits behind a Start that never returned: that is
			// a start failure, and is reported as one.
			p.side.Close()
			s.startFailed(p, fmt.Errorf("its Start had not returned %v after the session stopped", stopTimeout))
			continue
		}
		s.logf("%s: %v (after %v); its SMB is scraped as it is", p.label(), ErrStopTimeout, stopTimeout)
		p.dataSourceErrs.Add(1)
		if p.faults.err == "" {
			p.faults.err = fmt.Sprintf("%v (after %v): killed", ErrStopTimeout, stopTimeout)
		}
		p.side.Close()
		p.state = stateStopped
	}
}
