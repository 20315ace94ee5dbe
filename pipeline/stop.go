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
	for _, p := range s.producers {
		switch p.state {
		case stateRunning, stateStarting:
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
		s.logf("%s: %v (after %v); its SMB is scraped as it is", p.label(), errStopTimeout, stopTimeout)
		p.dataSourceErrs.Add(1)
		if p.faults.err == "" {
			p.faults.err = fmt.Sprintf("%v (after %v): killed", errStopTimeout, stopTimeout)
		}
		p.side.close()
		p.state = stateStopped
	}
}
