package pipeline

import "time"

// scheduleRestart relaunches a plugin that died while recording, after
// its restart.backoff, if its restart.max allows another run. The new
// producer gets a fresh SMB and ProducerID (new sequences); what the dead
// one committed stays in the buffers.
func (s *Service) scheduleRestart(p *producer) bool {
	rc := s.cfg.DataSources[p.index].Restart
	if rc == nil || p.restarts >= rc.Max || s.phase != phaseRecording || s.cfg.DataSources[p.index].Plugin == "" {
		return false
	}
	s.restartsPending++
	time.AfterFunc(rc.Backoff, func() {
		select {
		case s.restartC <- p:
		case <-s.finished:
		}
	})
	return true
}

// restart starts the replacement of dead producer old.
func (s *Service) restart(old *producer) {
	s.restartsPending--
	if s.phase != phaseRecording {
		return
	}
	if len(s.producers) >= 1<<16-1 {
		s.logf("%s: not restarted: out of producer ids", old.label())
		return
	}
	p, err := s.buildProducer(old.index, uint16(len(s.producers)+1))
	if err != nil {
		s.logf("%s: restart: %v", old.label(), err)
		return
	}
	p.restarts = old.restarts + 1
	s.producers = append(s.producers, p)
	s.logf("%s: restarted (%d of %d) on a fresh SMB", p.label(), p.restarts, s.cfg.DataSources[p.index].Restart.Max)
	p.state = stateStarting
	s.allStarted = false
	s.timers.start.Reset(startTimeout)
	go p.run()
}
