package pipeline

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/tracepipe/tracepipe/buffer"
	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/smb"
	"github.com/tracepipe/tracepipe/transport/inprocess"
)

// producer is one data source instance with its own SMB, seen from the
// service: the chunk reader and decoded CommitData (service side), and a
// control goroutine that drives the instance through its Transport — the
// data source running in this process, a plugin process or a Perfetto
// producer (transport.go). Either way the data
// source runs on plugins/producer's runtime and its commits reach the
// service as CommitData bytes, which the service decodes and validates as
// untrusted input; the transports differ only in how commands and
// commits travel.
type producer struct {
	producerSpec
	client   buffer.ClientIdentity // trusted uid/pid; the pid is pid's once set
	pid      atomic.Int32          // the plugin process the service started (0: this process)
	side     Transport             // how the data source instance is reached
	smb      *smb.SMB
	commits  chan<- commitMsg
	notes    chan<- note
	finished <-chan struct{} // closed when the service stops accepting commits and notes

	// free recycles CommitData encodings: as many as the commit queue
	// holds, so that a producer whose commits wait out a read pass finds
	// its buffers again instead of allocating new ones (freeBytes, at most
	// maxFreeCommitBytes, bounds what the list keeps).
	free        chan []byte
	freeBytes   atomic.Int64
	commitsLate atomic.Uint64 // commits produced after the service finished
	// queued counts the commits handed to the service and not yet handled
	// (incremented by deliver, decremented on the service goroutine).
	queued         atomic.Int64
	ctrl           chan ctrlMsg  // flush and clear requests
	stopC          chan struct{} // closed to ask the control goroutine to stop the data source
	stopOnce       sync.Once
	ctrlDone       chan struct{} // closed when the control goroutine returned
	dataSourceErrs atomic.Uint64

	// Service side, used only on the service goroutine.
	faults     producerFaults
	state      producerState
	finiteDone bool // the data source said it wrote everything it will
	// quietWhenExited: once side.Exited() is closed no further commit is
	// delivered (a plugin: its commit stream ended). A dead producer of
	// this kind gives its SMB back as soon as its queued commits are
	// handled, so that a plugin restarted many times holds one SMB.
	quietWhenExited bool
	releaseOnDrain  bool   // dead, quiet, scraped: close the SMB once queued is 0
	restarts        int    // how many times data_sources[index] was restarted before this producer
	flushOut        uint64 // a flush request the control goroutine has not finished (0: none)
	reader          *smb.Reader
	cd              smb.CommitData
	patches         []buffer.Patch
	scrapeBuf       []byte
	// onChunk and onPatch are bound once so ReadCommit calls allocate nothing.
	onChunk func(*smb.ChunkView)
	onPatch func(*smb.ChunkToPatch)
	// onScrape, if set, takes scraped chunks instead of onChunk: a shared
	// SMB holds other instances' chunks too.
	onScrape func(*smb.ChunkView)

	// remote is the instance a remote producer serves (nil: the session
	// started the data source itself).
	remote *RemoteInstance

	// onTriggers receives the triggers the data source activates
	// (plugins.TriggerHost), from any goroutine; set by the service.
	onTriggers func(names []string)
}

// producerSpec is what the service knows of a producer before it runs.
type producerSpec struct {
	id     uint16 // service ProducerID (1..)
	index  int    // data_sources[index]
	name   string // data source name
	target int    // buffer index the instance may write into
	// source names the producer in messages: the plugin path, else the name.
	source string
	// wire is the target_buffer value of the instance's commits:
	// bufferID(target), or for a Perfetto producer the global buffer id
	// (set by newProducer when zero).
	wire   uint32
	policy smb.BufferExhaustedPolicy
	// abortOnStartError ends the session when this data source fails to start.
	abortOnStartError bool
}

// label is how messages name the producer: data_sources[i] (source).
func (sp producerSpec) label() string {
	return fmt.Sprintf("data_sources[%d] (%s)", sp.index, sp.source)
}

// producerState is where a producer is in its lifecycle (service goroutine).
type producerState int

const (
	// stateIdle: not started yet (a start_tracing session before its
	// trigger); there is nothing to stop.
	stateIdle producerState = iota
	stateStarting
	stateRunning
	stateStartFailed
	stateDead // exited on its own (crash, kill): not waited for any more
	stateStopping
	stateStopped
)

// live reports whether the data source may still write and answer.
func (st producerState) live() bool { return st == stateRunning }

// commitMsg carries one encoded CommitData from a producer to the service.
type commitMsg struct {
	p    *producer
	data []byte
}

type noteKind int

const (
	noteStarted noteKind = iota
	noteStartFailed
	noteFlushReturned
	noteFinished // plugins.Finite: the data source is done
	noteDied
	noteStopped
)

// note tells the service goroutine what a producer's control goroutine
// saw. The service loop handles notes beside commits, in every phase.
type note struct {
	p       *producer
	kind    noteKind
	flushID uint64
	err     error
}

type ctrlKind int

const (
	ctrlFlush ctrlKind = iota
	ctrlClear
)

// ctrlMsg is a request to the producer's control goroutine, which makes
// every call into the Transport (they must never run concurrently).
type ctrlMsg struct {
	kind    ctrlKind
	flushID uint64
	flags   plugins.FlushFlags // ctrlFlush: why
}

// bufferID is the target_buffer value writers put in their commits: the
// buffer index + 1, so that 0 stays "unknown" as in scraped chunks.
func bufferID(index int) uint32 { return uint32(index + 1) }

// newProducer builds the service side of a producer around its SMB.
func newProducer(spec producerSpec, s *smb.SMB, client buffer.ClientIdentity, commits chan<- commitMsg, notes chan<- note, finished <-chan struct{}) *producer {
	if spec.wire == 0 {
		spec.wire = bufferID(spec.target)
	}
	return &producer{
		producerSpec: spec, client: client, smb: s,
		commits: commits, notes: notes, finished: finished,
		free:     make(chan []byte, commitQueueLen),
		ctrl:     make(chan ctrlMsg, 4),
		stopC:    make(chan struct{}),
		ctrlDone: make(chan struct{}),
		reader:   smb.NewReader(s),
	}
}

// scrapeSMB copies the chunks still in the producer's SMB (service
// goroutine).
func (p *producer) scrapeSMB() {
	if p.onScrape != nil {
		p.reader.Scrape(p.onScrape)
		return
	}
	p.reader.Scrape(p.onChunk)
}

// trustedClient is the identity the service stamps on the producer's
// packets: the pid of the plugin process it started, else its own.
func (p *producer) trustedClient() buffer.ClientIdentity {
	c := p.client
	if pid := p.pid.Load(); pid != 0 {
		c.PID = pid
	}
	return c
}

// deliver hands one CommitData encoding to the service, as an IPC channel
// would. It blocks while the service's commit queue is full (backpressure,
// like a full socket) but never after the service finished.
func (p *producer) deliver(data []byte) {
	p.queued.Add(1)
	select {
	case p.commits <- commitMsg{p: p, data: data}:
	case <-p.finished:
		p.queued.Add(-1)
		p.commitsLate.Add(1)
	}
}

// post sends a note to the service unless it finished.
func (p *producer) post(n note) {
	n.p = p
	select {
	case p.notes <- n:
	case <-p.finished:
	}
}

// commitBuffer returns a recycled buffer for a CommitData encoding.
func (p *producer) commitBuffer() []byte {
	select {
	case b := <-p.free:
		p.freeBytes.Add(-int64(cap(b)))
		return b[:0]
	default:
		return nil
	}
}

// maxFreeCommitBytes bounds the bytes of CommitData buffers a producer's
// free list keeps: a commit queue's worth of up to 1 KiB each (a Perfetto
// SDK's posted commits range from one chunk to a few dozen, and a
// recycled buffer keeps the size of the largest commit it held), never a
// burst of larger ones (those become garbage).
const maxFreeCommitBytes = commitQueueLen << 10

// recycle returns a commit's bytes for reuse (service goroutine).
func (p *producer) recycle(b []byte) {
	n := int64(cap(b))
	if n == 0 || p.freeBytes.Load()+n > maxFreeCommitBytes {
		return
	}
	p.freeBytes.Add(n)
	select {
	case p.free <- b:
	default:
		p.freeBytes.Add(-n)
	}
}

// run is the control goroutine: it starts the data source, serves flush
// and clear requests one at a time, and stops the data source when asked.
// Every outcome is posted to the service as a note; nothing here waits for
// the service except through its bounded queues.
func (p *producer) run() {
	defer close(p.ctrlDone)
	if err := p.side.Start(p); err != nil {
		p.dataSourceErrs.Add(1)
		p.post(note{kind: noteStartFailed, err: err})
		return
	}
	p.post(note{kind: noteStarted})
	go p.watch()
	for {
		select {
		case <-p.stopC:
			err := p.side.Stop()
			if err != nil {
				p.dataSourceErrs.Add(1)
			}
			p.post(note{kind: noteStopped, err: err})
			return
		case m := <-p.ctrl:
			switch m.kind {
			case ctrlFlush:
				if err := p.side.Flush(m.flushID, m.flags); err != nil {
					p.dataSourceErrs.Add(1)
				}
				p.post(note{kind: noteFlushReturned, flushID: m.flushID})
			case ctrlClear:
				p.side.ClearIncrementalState()
			}
		}
	}
}

// watch tells the service when the data source is done (Finite) or gone.
func (p *producer) watch() {
	done, exited := p.side.Done(), p.side.Exited()
	for done != nil || exited != nil {
		select {
		case <-done:
			p.post(note{kind: noteFinished})
			done = nil
		case <-exited:
			p.post(note{kind: noteDied, err: p.side.ExitErr()})
			return
		case <-p.stopC:
			return
		}
	}
}

// request posts a control message without blocking the service: a
// producer whose control goroutine is stuck simply misses it.
func (p *producer) request(m ctrlMsg) bool {
	select {
	case p.ctrl <- m:
		return true
	default:
		return false
	}
}

// requestStop asks the control goroutine to stop the data source once the
// call it is in (if any) returned. It never blocks.
func (p *producer) requestStop() { p.stopOnce.Do(func() { close(p.stopC) }) }

// ErrStopTimeout says a data source did not stop in time (a Transport's
// Stop may wrap it).
var ErrStopTimeout = errors.New("did not stop in time")

// newInProcess builds an in-process producer (transport/inprocess): private
// SMB and the producer runtime of the data source instance ds.
func newInProcess(spec producerSpec, ds plugins.DataSource, smbSize, pageSize int,
	client buffer.ClientIdentity, commits chan<- commitMsg, notes chan<- note, finished <-chan struct{}) (*producer, error) {
	var p *producer
	t, s, err := inprocess.New(inprocess.Config{
		DataSource: ds, SMBSize: smbSize, PageSize: pageSize,
		TargetBuffer: bufferID(spec.target), Policy: spec.policy,
		OnTriggers: func(names []string) { p.onTriggers(names) },
	})
	if err != nil {
		return nil, err
	}
	p = newProducer(spec, s, client, commits, notes, finished)
	p.side = t
	return p, nil
}
