// Package producer is the producer runtime every data source runs on,
// in this process (pipeline) or in a plugin process (plugins/sdk): the SMB
// arbiter, the instance's TraceWriters, commit batching with a periodic
// push, the flush acknowledgement and an orderly stop that closes every
// writer. In-process and plugin data sources differ only in how the
// CommitData the runtime produces reaches the service (the transport:
// a channel or the plugin's gRPC stream).
//
// The package must not know about transports, sessions or trust: it only
// writes into an SMB it was given and hands out CommitData.
package producer

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/smb"
)

// CommitTick is how often batched commits are pushed to the service, so a
// slow data source's chunks do not wait for the next flush.
const CommitTick = 50 * time.Millisecond

// StallTimeout bounds a writer's wait for a free chunk under the stall
// policy. It is kept at the service's stop bound, so that a data source
// whose writers are stalled still stops in time.
const StallTimeout = 5 * time.Second

// Config describes the SMB a runtime writes into and where its commits go.
type Config struct {
	// SMB is the shared memory buffer of this producer.
	SMB *smb.SMB
	// TargetBuffer is the buffer id every writer puts in its chunks.
	TargetBuffer uint32
	// Policy is the writers' buffer-exhausted policy.
	Policy smb.BufferExhaustedPolicy
	// OnCommit receives every CommitData, never concurrently with itself.
	// The runtime reuses cd once OnCommit returns (encode what you keep).
	OnCommit func(cd *smb.CommitData)
	// OnTriggers receives the names a data source activates
	// (ActivateTriggers), from any goroutine; nil drops them.
	OnTriggers func(names []string)
}

// Runtime runs one data source instance on one SMB. Its lifecycle methods
// (Start, Flush, ClearIncrementalState, Stop) are serialised; NewWriter
// (the plugins.Host of the instance) may be called from any goroutine.
type Runtime struct {
	arb    *smb.Arbiter
	target uint32
	policy smb.BufferExhaustedPolicy
	ds     plugins.DataSource

	onTriggers func(names []string)

	mu       sync.Mutex // serialises the lifecycle calls
	started  bool
	stopped  bool
	tickStop chan struct{}
	tickDone chan struct{}

	wmu     sync.Mutex // guards writers and closed
	writers []*smb.TraceWriter
	closed  bool
}

// New builds the runtime of ds (not started).
func New(cfg Config, ds plugins.DataSource) (*Runtime, error) {
	if ds == nil {
		return nil, errors.New("producer: no data source")
	}
	if cfg.SMB == nil || cfg.OnCommit == nil {
		return nil, errors.New("producer: needs an SMB and an OnCommit callback")
	}
	arb, err := smb.NewArbiter(cfg.SMB, smb.ArbiterOptions{
		Layout:       smb.LayoutDiv1,
		Commit:       smb.CommitBatched,
		OnCommit:     cfg.OnCommit,
		StallTimeout: StallTimeout,
	})
	if err != nil {
		return nil, err
	}
	return &Runtime{arb: arb, target: cfg.TargetBuffer, policy: cfg.Policy, ds: ds, onTriggers: cfg.OnTriggers}, nil
}

// NewWriter implements plugins.Host: a new sequence in the SMB aimed at the
// instance's buffer.
func (r *Runtime) NewWriter() (plugins.PacketWriter, error) {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.closed {
		return nil, errors.New("producer: the data source is stopped")
	}
	w, err := r.arb.NewTraceWriter(r.target, r.policy)
	if err != nil {
		return nil, err
	}
	r.writers = append(r.writers, w)
	return w, nil
}

// Start starts the commit ticker and the data source.
func (r *Runtime) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return errors.New("producer: already started")
	}
	r.started = true
	r.tickStop, r.tickDone = make(chan struct{}), make(chan struct{})
	go r.tick(r.tickStop, r.tickDone)
	if err := r.ds.Start(r); err != nil {
		// A data source that did not start commits nothing: its ticker
		// ends now (the session may never call Stop for it).
		r.endTicker()
		return err
	}
	return nil
}

// endTicker stops the commit ticker once. REQUIRES: r.mu held.
func (r *Runtime) endTicker() {
	if r.tickStop != nil {
		close(r.tickStop)
		<-r.tickDone
		r.tickStop = nil
	}
}

func (r *Runtime) tick(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(CommitTick)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			r.arb.FlushPendingCommits()
		}
	}
}

// Flush is FlushWithFlags without a reason (FlushReasonUnknown).
func (r *Runtime) Flush(flushID uint64) error { return r.FlushWithFlags(flushID, 0) }

// FlushWithFlags flushes the data source (if it runs; one implementing
// plugins.FlagsFlusher is told flags), then acknowledges flushID with a
// CommitData sent after every chunk returned so far, even an empty one,
// so the service sees the acknowledgement whatever the flush returned.
func (r *Runtime) FlushWithFlags(flushID uint64, flags plugins.FlushFlags) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var err error
	if r.started && !r.stopped {
		if ff, ok := r.ds.(plugins.FlagsFlusher); ok {
			err = ff.FlushWithFlags(flags)
		} else {
			err = r.ds.Flush()
		}
	}
	r.arb.SendFlushAck(flushID)
	return err
}

// ClearIncrementalState forwards to a running data source.
func (r *Runtime) ClearIncrementalState() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started && !r.stopped {
		r.ds.ClearIncrementalState()
	}
}

// Stop stops the data source, closes every writer it opened (finishing
// their last chunks), stops the ticker and delivers the last commits.
// Stopping twice, or before Start, only delivers what is pending.
func (r *Runtime) Stop() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var err error
	if r.started && !r.stopped {
		r.stopped = true
		err = r.ds.Stop()
		r.wmu.Lock()
		writers := r.writers
		r.closed = true
		r.wmu.Unlock()
		for _, w := range writers {
			if cerr := w.Close(); cerr != nil && !errors.Is(cerr, smb.ErrWriterClosed) {
				err = errors.Join(err, fmt.Errorf("closing writer %d: %w", w.ID(), cerr))
			}
		}
		r.endTicker()
	}
	r.wmu.Lock()
	r.closed = true
	r.wmu.Unlock()
	r.arb.FlushPendingCommits()
	return err
}

// PacketsDropped sums the SMB-full drops of every writer ever opened.
func (r *Runtime) PacketsDropped() uint64 {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	var n uint64
	for _, w := range r.writers {
		n += w.Stats().PacketsDropped
	}
	return n
}

// Done is the data source's plugins.Finite channel, or nil when it never
// ends on its own.
func (r *Runtime) Done() <-chan struct{} {
	if f, ok := r.ds.(plugins.Finite); ok {
		return f.Done()
	}
	return nil
}
