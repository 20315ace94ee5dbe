package pipeline

import (
	"errors"
	"time"

	"github.com/tracepipe/tracepipe/buffer"
	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/smb"
)

// RemoteProducers is a producer transport whose producers connect on
// their own and register data sources by name — Perfetto's producer
// socket (package transport/perfetto) — so that a session binds them to
// its data sources instead of starting them (Options.Perfetto). Its
// methods may be called from any goroutine and must not block.
type RemoteProducers interface {
	// Serves says whether a session binds remote producers for data
	// source name rather than starting a built-in one.
	Serves(name string) bool
	// NewSession makes a session's identity for the producers: its
	// tracing session id (id, or a new one when 0) and one buffer id per
	// buffer, unique across sessions. New calls it once, for a session
	// that binds any.
	NewSession(id uint64, buffers int) RemoteSession
	// Counts are traced's producers_connected, producers_seen,
	// data_sources_registered and data_sources_seen (TraceStats).
	Counts() (connected, seen, registered, instances uint64)
	// WatchTriggers makes s a target of the producers' triggers
	// (Service.ActivateTriggersFrom) until unwatch is called; Run calls it
	// for a session with a trigger_config.
	WatchTriggers(s *Service) (unwatch func())
	// Changed returns a channel that is closed at the next change of the
	// connected producers or of the data sources they registered (a
	// connection, a registration, a disconnection, ...). A session with
	// remotely served data sources waits on it while it records, takes a
	// new one, then starts the producers that joined (late joiners, as
	// traced's RegisterDataSource starts them for running sessions): many
	// changes before the session looks are one look.
	Changed() <-chan struct{}
}

// RemoteSession binds one session's data sources to connected producers.
type RemoteSession interface {
	// Bind returns one instance per connected producer that registered
	// data_sources[index] (dc) and that dc's producer filters admit, in
	// connection order, each a new data source instance of the session
	// (duration: the session's). None is no error: as under traced, the
	// session runs and producers that register later join it. With bound
	// set (late joiners, ChangeProducerFilters), the connections it
	// reports as already serving the data source are skipped. It returns
	// the instances it made and the errors of those it could not make
	// (with bound nil, at New, it stops at the first).
	Bind(index int, dc *config.DataSourceConfig, duration time.Duration, bound func(conn any) bool) ([]RemoteInstance, error)
}

// RemoteInstance is one data source instance a remote producer serves,
// as the session needs it.
type RemoteInstance struct {
	Transport Transport
	// SMB is the session's own mapping of the producer's shared memory
	// (the session closes it at its end).
	SMB    *smb.SMB
	Client buffer.ClientIdentity // trusted, from the connection
	Source string                // how messages name the producer
	Name   string                // the producer's own name (Observe)
	Wire   uint32                // the target_buffer value of its commits
	Conn   any                   // the connection serving it (Bind's bound)
	// Scrapes says whether a chunk of trace writer w scraped from the
	// SMB (shared by the connection's instances) is this instance's.
	Scrapes func(w uint16) bool
}

// remoteSession returns the session's identity for its remote producers,
// made on first use.
func (s *Service) remoteSession() RemoteSession {
	if s.remote == nil {
		s.remote = s.opts.Perfetto.NewSession(s.opts.TracingSessionID, len(s.cfg.Buffers))
	}
	return s.remote
}

// addRemoteProducers adds one producer (a data source instance) per
// connected remote producer that registered data_sources[i].name, maybe
// none: producers that register it later join the running session
// (joinLate). (The buffer-exhausted policy is the producer's own: its SDK
// applies it.)
func (s *Service) addRemoteProducers(i int) error {
	dc := &s.cfg.DataSources[i]
	s.joinable = append(s.joinable, i)
	insts, err := s.remoteSession().Bind(i, dc, s.cfg.Duration, nil)
	for _, in := range insts {
		s.producers = append(s.producers, s.newRemoteProducer(i, in, dc.OnStartError == config.OnStartErrorAbort))
	}
	return err
}

// joinLate binds, for every data source remote producers serve, the
// connected producers that registered it, that its producer filters admit
// and that do not serve it in this session yet: producers that connected
// or registered after the session was made. Service goroutine; Run's loop
// calls it when RemoteProducers.Changed fires while the session records
// with its data sources started, and startProducers before it starts
// them (producers that came between New and Run, or before a start
// trigger). The stop never waits for a joiner that is not bound yet: once
// the session stops recording, nobody joins; a joiner bound before is
// flushed and stopped as every other producer.
func (s *Service) joinLate() {
	s.joinC = s.opts.Perfetto.Changed() // first: a change during this pass wakes the next
	s.joinedAt = time.Now()
	for _, i := range s.joinable {
		if err := s.bindJoiners(i); err != nil {
			s.logf("data_sources[%d] %q: a producer that registered it could not join the session: %v", i, s.cfg.DataSources[i].Name, err)
		}
	}
}

// joinInterval is the least time between two late-join passes of a
// session: a producer that registers and unregisters in a loop costs each
// session at most one pass per interval, not one per message.
const joinInterval = 20 * time.Millisecond

// DefaultMaxInstances is Options.MaxInstances' default: the most data
// source instances a session makes, those that joined late included.
// Each keeps a mapping of its producer's SMB until the session ends, and
// producer ids are 16 bits: a producer that reconnects over and over
// cannot grow a session beyond it.
const DefaultMaxInstances = 4096

// maxInstances is the session's bound on its data source instances.
func (s *Service) maxInstances() int {
	if n := s.opts.MaxInstances; n > 0 {
		return min(n, DefaultMaxInstances)
	}
	return DefaultMaxInstances
}

// bindJoiners binds the producers admitted to data_sources[i] that do not
// serve it in this session yet (joinLate, ChangeProducerFilters) and, once
// the session started its data sources, starts them; before that,
// startProducers starts them with the others. A joiner's start failure
// never ends the session (its on_start_error applies to the producers
// present at the start).
func (s *Service) bindJoiners(i int) error {
	dc := &s.cfg.DataSources[i]
	bound := map[any]bool{}
	for _, p := range s.producers {
		if p.remote != nil && p.index == i {
			bound[p.remote.Conn] = true
		}
	}
	insts, err := s.remoteSession().Bind(i, dc, s.cfg.Duration, func(conn any) bool { return bound[conn] })
	for k, in := range insts {
		if len(s.producers) >= s.maxInstances() {
			for _, left := range insts[k:] {
				left.Transport.Close()
				_ = left.SMB.Close()
			}
			if !s.joinsRefused {
				s.joinsRefused = true
				s.logf("data_sources[%d] %q: the session has %d data source instances, the most it takes: producers that register later do not join it", i, dc.Name, len(s.producers))
			}
			break
		}
		p := s.newRemoteProducer(i, in, false)
		s.producers = append(s.producers, p)
		s.instances.Store(int64(len(s.producers)))
		if perr := s.addProtoVM(p); perr != nil {
			err = errors.Join(err, perr)
		} else if dc.ProtoVM != nil {
			s.buffers[p.target].observeOverwrites()
		}
		if s.started {
			// The start bound covers a joiner as the others (a start
			// notification never answered fails it, not the session).
			s.timers.start.Reset(startTimeout)
			p.state = stateStarting
			go p.run()
		}
	}
	return err
}

// newRemoteProducer builds the producer of instance in, serving
// data_sources[i]; abortOnStartError: its start failure ends the session.
func (s *Service) newRemoteProducer(i int, in RemoteInstance, abortOnStartError bool) *producer {
	dc := &s.cfg.DataSources[i]
	spec := producerSpec{id: uint16(len(s.producers) + 1), index: i, name: dc.Name, target: dc.TargetBuffer,
		source: in.Source, wire: in.Wire, abortOnStartError: abortOnStartError}
	p := newProducer(spec, in.SMB, in.Client, s.commits, s.notes, s.finished)
	p.side = in.Transport
	p.remote = &in
	p.onChunk = func(v *smb.ChunkView) { s.copyChunk(p, v) }
	p.onScrape = func(v *smb.ChunkView) {
		if in.Scrapes == nil || in.Scrapes(v.WriterID) {
			s.copyChunk(p, v)
		}
	}
	p.onPatch = func(c *smb.ChunkToPatch) { s.patchChunk(p, c) }
	return p
}

// setupSequenced sets up, then begins, the Sequenced instances among ps
// in order: every setup before any start, as traced. Each instance's
// control goroutine then waits for its own notification in Start.
func setupSequenced(ps []*producer) {
	for _, p := range ps {
		if sq, ok := p.side.(Sequenced); ok {
			_ = sq.Setup(p) // an error is the start's, reported by Start
		}
	}
	for _, p := range ps {
		if sq, ok := p.side.(Sequenced); ok {
			sq.Begin()
		}
	}
}

// stopSequenced sends the stop of the Sequenced instances among ps that
// run, in order, before their control goroutines wait in Stop.
func stopSequenced(ps []*producer) {
	for _, p := range ps {
		if sq, ok := p.side.(Sequenced); ok && (p.state == stateRunning || p.state == stateStarting) {
			sq.SendStop()
		}
	}
}

// ActivateTriggersFrom is ActivateTriggers for a remote producer, with
// the uid of its socket (for producer_name_regex and the trigger
// packets). Safe for concurrent use; it never blocks.
func (s *Service) ActivateTriggersFrom(producer string, uid int64, names []string) (acted []string) {
	return s.activateTriggers(producer, uid, names)
}

// DataSourceInstances is the number of data source instances the session
// made: one per built-in or plugin data source, one per Perfetto producer
// serving a data source (late joiners included). Safe for concurrent use
// (QueryServiceState's num_data_sources).
func (s *Service) DataSourceInstances() int { return int(s.instances.Load()) }
