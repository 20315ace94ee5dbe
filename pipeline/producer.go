package pipeline

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tracepipe/tracepipe/buffer"
	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/smb"
)

// producer is one in-process data source instance with its own SMB: the
// producer side (arbiter, writers, the data source's goroutines) and the
// service side (chunk reader, decoded CommitData) of the same ABI a plugin
// uses. Commits cross from one side to the other as CommitData bytes, so
// the service decodes them exactly as it would a plugin's.
type producer struct {
	id       uint16 // service ProducerID (1..)
	index    int    // data_sources[index]
	name     string // data source name
	target   int    // buffer index the instance may write into
	client   buffer.ClientIdentity
	ds       plugins.DataSource
	smb      *smb.SMB
	arbiter  *smb.Arbiter
	policy   smb.BufferExhaustedPolicy
	commits  chan<- commitMsg
	finished <-chan struct{} // closed when the service stops accepting commits

	// Producer side. free recycles CommitData encodings.
	free           chan []byte
	commitsLate    atomic.Uint64 // commits produced after the service finished
	ctrl           chan ctrlMsg
	ctrlDone       chan struct{}
	writersMu      sync.Mutex
	writers        []*smb.TraceWriter
	dataSourceErrs atomic.Uint64

	// Service side, used only on the service goroutine.
	reader    *smb.Reader
	cd        smb.CommitData
	patches   []buffer.Patch
	scrapeBuf []byte
	// onChunk and onPatch are bound once so ReadCommit calls allocate nothing.
	onChunk func(*smb.ChunkView)
	onPatch func(*smb.ChunkToPatch)
}

// commitMsg carries one encoded CommitData from a producer to the service.
type commitMsg struct {
	p    *producer
	data []byte
}

type ctrlKind int

const (
	ctrlStart ctrlKind = iota
	ctrlFlush
	ctrlClear
	ctrlStop
)

// ctrlMsg is a request to the producer's control goroutine, which makes
// every DataSource call (they must never run concurrently).
type ctrlMsg struct {
	kind    ctrlKind
	flushID uint64
	done    chan error // for start and stop: the result
}

// bufferID is the target_buffer value writers put in their commits: the
// buffer index + 1, so that 0 stays "unknown" as in scraped chunks.
func bufferID(index int) uint32 { return uint32(index + 1) }

// newProducer builds the SMB and arbiter of one data source instance.
func newProducer(id uint16, index int, name string, target int, ds plugins.DataSource, smbSize, pageSize int,
	policy smb.BufferExhaustedPolicy, client buffer.ClientIdentity, commits chan<- commitMsg, finished <-chan struct{}) (*producer, error) {
	s, err := smb.NewHeapSMB(smbSize, pageSize)
	if err != nil {
		return nil, err
	}
	p := &producer{
		id: id, index: index, name: name, target: target, client: client, ds: ds, smb: s, policy: policy,
		commits: commits, finished: finished,
		free:     make(chan []byte, 16),
		ctrl:     make(chan ctrlMsg, 4),
		ctrlDone: make(chan struct{}),
		reader:   smb.NewReader(s),
	}
	p.arbiter, err = smb.NewArbiter(s, smb.ArbiterOptions{
		Layout:       smb.LayoutDiv1,
		Commit:       smb.CommitBatched,
		OnCommit:     p.sendCommit,
		StallTimeout: 5 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// sendCommit is the arbiter's OnCommit: it encodes the CommitData (the
// arbiter reuses it) and hands the bytes to the service, as a plugin's
// IPC channel would. It blocks while the service's commit queue is full
// (backpressure, like a full socket) but never after the service finished.
func (p *producer) sendCommit(cd *smb.CommitData) {
	var buf []byte
	select {
	case buf = <-p.free:
	default:
	}
	msg := commitMsg{p: p, data: cd.AppendMarshal(buf[:0])}
	select {
	case p.commits <- msg:
	case <-p.finished:
		p.commitsLate.Add(1)
	}
}

// recycle returns a commit's bytes for reuse (service goroutine).
func (p *producer) recycle(b []byte) {
	select {
	case p.free <- b:
	default:
	}
}

// NewWriter implements plugins.Host: a new sequence in this producer's SMB
// aimed at the instance's buffer.
func (p *producer) NewWriter() (plugins.PacketWriter, error) {
	w, err := p.arbiter.NewTraceWriter(bufferID(p.target), p.policy)
	if err != nil {
		return nil, err
	}
	p.writersMu.Lock()
	p.writers = append(p.writers, w)
	p.writersMu.Unlock()
	return w, nil
}

// packetsDropped sums the SMB-full drops of every writer ever created.
func (p *producer) packetsDropped() uint64 {
	p.writersMu.Lock()
	defer p.writersMu.Unlock()
	var n uint64
	for _, w := range p.writers {
		n += w.Stats().PacketsDropped
	}
	return n
}

// run is the control goroutine: every DataSource call happens here, one
// at a time. It ends after a stop request.
func (p *producer) run() {
	defer close(p.ctrlDone)
	tick := time.NewTicker(commitFlushTick)
	defer tick.Stop()
	for {
		var m ctrlMsg
		select {
		case m = <-p.ctrl:
		case <-tick.C:
			// Batched commits reach the service at least this often, so
			// a slow data source's chunks do not wait for a flush.
			p.arbiter.FlushPendingCommits()
			continue
		}
		switch m.kind {
		case ctrlStart:
			err := p.ds.Start(p)
			if err != nil {
				p.dataSourceErrs.Add(1)
			}
			m.done <- err
		case ctrlFlush:
			if err := p.ds.Flush(); err != nil {
				p.dataSourceErrs.Add(1)
			}
			// The flush ack rides on the next CommitData, sent even when
			// empty, after every chunk returned so far.
			p.arbiter.SendFlushAck(m.flushID)
		case ctrlClear:
			p.ds.ClearIncrementalState()
		case ctrlStop:
			err := p.ds.Stop()
			if err != nil {
				p.dataSourceErrs.Add(1)
			}
			p.arbiter.FlushPendingCommits()
			m.done <- err
			return
		}
	}
}

// request posts a control message without blocking the service: a
// producer whose control goroutine is stuck simply misses it (its flush
// then times out, which is counted).
func (p *producer) request(m ctrlMsg) bool {
	select {
	case p.ctrl <- m:
		return true
	default:
		return false
	}
}

// start runs ds.Start on the control goroutine and waits for it.
func (p *producer) start(timeout time.Duration) error {
	go p.run()
	done := make(chan error, 1)
	p.ctrl <- ctrlMsg{kind: ctrlStart, done: done}
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("data_sources[%d] (%s): start: %w", p.index, p.name, err)
		}
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("data_sources[%d] (%s): start did not return within %v", p.index, p.name, timeout)
	}
}

// errStopTimeout says a data source did not stop in time.
var errStopTimeout = errors.New("did not stop in time")
