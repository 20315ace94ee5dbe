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

// producer is one data source instance with its own SMB, seen from the
// service: the chunk reader and decoded CommitData (service side), and a
// control goroutine that drives the instance through its side — the data
// source running in this process, or a plugin process. Either way commits
// reach the service as CommitData bytes, which it decodes and validates as
// untrusted input.
type producer struct {
	id       uint16 // service ProducerID (1..)
	index    int    // data_sources[index]
	name     string // data source name
	target   int    // buffer index the instance may write into
	client   buffer.ClientIdentity
	side     side
	smb      *smb.SMB
	commits  chan<- commitMsg
	finished <-chan struct{} // closed when the service stops accepting commits

	// free recycles CommitData encodings.
	free           chan []byte
	commitsLate    atomic.Uint64 // commits produced after the service finished
	ctrl           chan ctrlMsg
	ctrlDone       chan struct{}
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

// side runs a producer's data source. Its methods are called from the
// producer's control goroutine only, one at a time, except packetsDropped
// (any goroutine).
type side interface {
	// start starts the data source; it may set p.client (a plugin's pid).
	start(p *producer) error
	// flush makes the data source commit everything it wrote, then
	// delivers a CommitData acknowledging flushID.
	flush(flushID uint64) error
	clearIncrementalState()
	// stop stops the data source and delivers its last commits.
	stop() error
	// tick pushes batched commits (every commitFlushTick).
	tick()
	// packetsDropped counts packets lost to a full SMB, as far as the
	// service can know.
	packetsDropped() uint64
	// done is closed when the data source ended on its own (nil: never).
	done() <-chan struct{}
	// close releases what stop left behind (a plugin process that did
	// not stop in time). Called once, after stop or its timeout.
	close()
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
// every call into the side (they must never run concurrently).
type ctrlMsg struct {
	kind    ctrlKind
	flushID uint64
	done    chan error // for start and stop: the result
}

// bufferID is the target_buffer value writers put in their commits: the
// buffer index + 1, so that 0 stays "unknown" as in scraped chunks.
func bufferID(index int) uint32 { return uint32(index + 1) }

// newProducer builds the service side of a producer around its SMB.
func newProducer(id uint16, index int, name string, target int, s *smb.SMB,
	client buffer.ClientIdentity, commits chan<- commitMsg, finished <-chan struct{}) *producer {
	return &producer{
		id: id, index: index, name: name, target: target, client: client, smb: s,
		commits: commits, finished: finished,
		free:     make(chan []byte, 16),
		ctrl:     make(chan ctrlMsg, 4),
		ctrlDone: make(chan struct{}),
		reader:   smb.NewReader(s),
	}
}

// deliver hands one CommitData encoding to the service, as an IPC channel
// would. It blocks while the service's commit queue is full (backpressure,
// like a full socket) but never after the service finished.
func (p *producer) deliver(data []byte) {
	select {
	case p.commits <- commitMsg{p: p, data: data}:
	case <-p.finished:
		p.commitsLate.Add(1)
	}
}

// commitBuffer returns a recycled buffer for a CommitData encoding.
func (p *producer) commitBuffer() []byte {
	select {
	case b := <-p.free:
		return b[:0]
	default:
		return nil
	}
}

// recycle returns a commit's bytes for reuse (service goroutine).
func (p *producer) recycle(b []byte) {
	select {
	case p.free <- b:
	default:
	}
}

// run is the control goroutine: every call into the side happens here,
// one at a time. It ends after a stop request.
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
			p.side.tick()
			continue
		}
		switch m.kind {
		case ctrlStart:
			err := p.side.start(p)
			if err != nil {
				p.dataSourceErrs.Add(1)
			}
			m.done <- err
		case ctrlFlush:
			if err := p.side.flush(m.flushID); err != nil {
				p.dataSourceErrs.Add(1)
			}
		case ctrlClear:
			p.side.clearIncrementalState()
		case ctrlStop:
			err := p.side.stop()
			if err != nil {
				p.dataSourceErrs.Add(1)
			}
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

// start runs the side's start on the control goroutine and waits for it.
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

// inProcess is the side of a data source running in this process: it
// writes through its own arbiter into a heap SMB, exactly as a plugin
// writes into its memfd SMB.
type inProcess struct {
	p         *producer
	ds        plugins.DataSource
	arbiter   *smb.Arbiter
	policy    smb.BufferExhaustedPolicy
	writersMu sync.Mutex
	writers   []*smb.TraceWriter
}

// newInProcess builds an in-process producer: heap SMB, arbiter, and the
// data source instance ds.
func newInProcess(id uint16, index int, name string, target int, ds plugins.DataSource, smbSize, pageSize int,
	policy smb.BufferExhaustedPolicy, client buffer.ClientIdentity, commits chan<- commitMsg, finished <-chan struct{}) (*producer, error) {
	s, err := smb.NewHeapSMB(smbSize, pageSize)
	if err != nil {
		return nil, err
	}
	p := newProducer(id, index, name, target, s, client, commits, finished)
	ip := &inProcess{p: p, ds: ds, policy: policy}
	ip.arbiter, err = smb.NewArbiter(s, smb.ArbiterOptions{
		Layout:       smb.LayoutDiv1,
		Commit:       smb.CommitBatched,
		OnCommit:     func(cd *smb.CommitData) { p.deliver(cd.AppendMarshal(p.commitBuffer())) },
		StallTimeout: 5 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	p.side = ip
	return p, nil
}

// NewWriter implements plugins.Host: a new sequence in this producer's SMB
// aimed at the instance's buffer.
func (ip *inProcess) NewWriter() (plugins.PacketWriter, error) {
	w, err := ip.arbiter.NewTraceWriter(bufferID(ip.p.target), ip.policy)
	if err != nil {
		return nil, err
	}
	ip.writersMu.Lock()
	ip.writers = append(ip.writers, w)
	ip.writersMu.Unlock()
	return w, nil
}

func (ip *inProcess) start(*producer) error { return ip.ds.Start(ip) }

func (ip *inProcess) flush(flushID uint64) error {
	err := ip.ds.Flush()
	// The flush ack rides on the next CommitData, sent even when empty,
	// after every chunk returned so far.
	ip.arbiter.SendFlushAck(flushID)
	return err
}

func (ip *inProcess) clearIncrementalState() { ip.ds.ClearIncrementalState() }

func (ip *inProcess) stop() error {
	err := ip.ds.Stop()
	ip.arbiter.FlushPendingCommits()
	return err
}

func (ip *inProcess) tick() { ip.arbiter.FlushPendingCommits() }

// packetsDropped sums the SMB-full drops of every writer ever created.
func (ip *inProcess) packetsDropped() uint64 {
	ip.writersMu.Lock()
	defer ip.writersMu.Unlock()
	var n uint64
	for _, w := range ip.writers {
		n += w.Stats().PacketsDropped
	}
	return n
}

func (ip *inProcess) done() <-chan struct{} {
	if f, ok := ip.ds.(plugins.Finite); ok {
		return f.Done()
	}
	return nil
}

func (ip *inProcess) close() {}
