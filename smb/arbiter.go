package smb

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// CommitPolicy says when an Arbiter hands batched commits to its owner.
type CommitPolicy int

const (
	// CommitEachChunk delivers a CommitData as soon as a chunk is returned
	// or a patch becomes known.
	CommitEachChunk CommitPolicy = iota
	// CommitBatched accumulates returned chunks and delivers them when the
	// owner calls FlushPendingCommits, when a writer flushes, when a patch
	// becomes known, or when half of the SMB's chunks are pending.
	CommitBatched
	// CommitPosted is Perfetto's producer arbiter with its default
	// batch_commits_duration_ms of 0: the first chunk returned into an
	// empty request calls ArbiterOptions.OnPending, whose owner runs
	// FlushPendingCommits soon on another goroutine (the SDK posts a task
	// to its IPC thread); chunks returned before that runs join the same
	// CommitData. Patches and a half-full SMB deliver at once, as with
	// CommitBatched.
	CommitPosted
)

// BufferExhaustedPolicy says what a TraceWriter does when the SMB has no
// free chunk.
type BufferExhaustedPolicy int

const (
	// Drop loses the packet being written: a packet already begun in an
	// earlier chunk gets the drop sentinel as its fragment size, the rest
	// of it goes to a private garbage area, and the next packet that makes
	// it into the SMB carries previous_packet_dropped = 257
	// (DATA_LOSS_PRESENT | DATA_LOSS_SMB_FULL).
	Drop BufferExhaustedPolicy = iota
	// Stall waits (with back-off, flushing pending commits so the service
	// can free chunks) up to ArbiterOptions.StallTimeout, then reports an
	// error and drops the packet as Drop does. Until the writer gets a
	// chunk again it behaves as Drop (Perfetto's kStallThenDrop), so a
	// stuck service costs one timeout, not one per packet. The writer
	// holds its current chunk while it waits for the next one, so the SMB
	// needs more chunks than there are writers.
	Stall
)

// ArbiterOptions configures an Arbiter.
type ArbiterOptions struct {
	// Layout is how the arbiter partitions free pages (default LayoutDiv1,
	// as Perfetto's producer).
	Layout PageLayout
	// Commit selects when commits are delivered (default CommitEachChunk).
	Commit CommitPolicy
	// OnCommit receives every CommitData. It is called with no arbiter lock
	// held but never concurrently with itself, in the order chunks were
	// returned. The arbiter owns the CommitData: it is reused as soon as
	// OnCommit returns, so OnCommit must copy or marshal what it keeps.
	// OnCommit must not call back into the Arbiter or its TraceWriters.
	OnCommit func(*CommitData)
	// OnPending is called, with no arbiter lock held, when a chunk is
	// returned into an empty pending request under CommitPosted. It must
	// not block nor call FlushPendingCommits itself.
	OnPending func()
	// StallTimeout bounds a Stall writer's wait for a free chunk
	// (default 10 s).
	StallTimeout time.Duration
}

// Arbiter is the producer side of an SMB: it hands free chunks to its
// TraceWriters, allocates their writer ids, and batches returned chunks and
// patches into CommitData for the service. It is safe for concurrent use;
// each TraceWriter must be used by one goroutine at a time.
type Arbiter struct {
	smb          *SMB
	layout       PageLayout
	policy       CommitPolicy
	onCommit     func(*CommitData)
	onPending    func()
	stallTimeout time.Duration
	totalChunks  int

	mu            sync.Mutex // guards the fields below
	lastPage      int        // page of the last successful allocation
	pending       *CommitData
	pendingChunks int
	lastWriterID  uint16
	usedIDs       [(MaxWriterID + 1 + 63) / 64]uint64

	deliverMu sync.Mutex // serializes deliveries; guards spare
	spare     *CommitData
}

// NewArbiter returns an arbiter writing into s.
func NewArbiter(s *SMB, opts ArbiterOptions) (*Arbiter, error) {
	if opts.Layout == LayoutNotPartitioned {
		opts.Layout = LayoutDiv1
	}
	if opts.Layout.NumChunks() == 0 {
		return nil, fmt.Errorf("smb: arbiter layout %d has no chunks", opts.Layout)
	}
	if opts.OnCommit == nil {
		return nil, errors.New("smb: arbiter needs an OnCommit callback")
	}
	if opts.Commit == CommitPosted && opts.OnPending == nil {
		return nil, errors.New("smb: arbiter with CommitPosted needs an OnPending callback")
	}
	if opts.StallTimeout <= 0 {
		opts.StallTimeout = 10 * time.Second
	}
	return &Arbiter{
		smb: s, layout: opts.Layout, policy: opts.Commit, onCommit: opts.OnCommit,
		onPending: opts.OnPending, stallTimeout: opts.StallTimeout,
		totalChunks: s.NumPages() * int(opts.Layout.NumChunks()),
		pending:     &CommitData{}, spare: &CommitData{},
	}, nil
}

// SMB returns the buffer the arbiter writes into.
func (a *Arbiter) SMB() *SMB { return a.smb }

// NewTraceWriter creates a writer (one packet sequence) targeting the
// given buffer. Writer ids are handed out 1..32767 round-robin; an error
// says they are all in use.
func (a *Arbiter) NewTraceWriter(targetBuffer uint32, policy BufferExhaustedPolicy) (*TraceWriter, error) {
	a.mu.Lock()
	id := uint16(0)
	for range MaxWriterID {
		c := a.lastWriterID%MaxWriterID + 1
		a.lastWriterID = c
		if a.usedIDs[c/64]&(1<<(c%64)) == 0 {
			a.usedIDs[c/64] |= 1 << (c % 64)
			id = c
			break
		}
	}
	a.mu.Unlock()
	if id == 0 {
		return nil, errors.New("smb: all 32767 writer ids are in use")
	}
	return newTraceWriter(a, id, targetBuffer, policy), nil
}

func (a *Arbiter) releaseWriterID(id uint16) {
	a.mu.Lock()
	a.usedIDs[id/64] &^= 1 << (id % 64)
	a.mu.Unlock()
}

// tryAcquire looks for a free chunk, starting at the page of the last
// successful allocation and wrapping around; a free page is partitioned
// with the arbiter's layout first, and the lowest free chunk of a page is
// taken. On success the chunk is BeingWritten and its header holds h.
func (a *Arbiter) tryAcquire(h ChunkHeader) (page int, idx uint32, chunk []byte, ok bool) {
	s := a.smb
	n := s.NumPages()
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range n {
		p := a.lastPage + i
		if p >= n {
			p -= n
		}
		bm := s.PageBitmap(p)
		if bm == 0 {
			s.tryPartition(p, a.layout)
			bm = s.PageBitmap(p)
		}
		free := FreeChunksMask(bm)
		for c := uint32(0); free != 0; c, free = c+1, free>>1 {
			if free&1 == 0 {
				continue
			}
			l, ok := s.transition(p, c, ChunkFree, ChunkBeingWritten)
			if !ok {
				continue
			}
			chunk = s.chunkBytes(p, l, c)
			yieldAt(siteAcquired)
			store32(chunk, 0, h.ChunkID)
			yieldAt(siteChunkIDStored)
			store32(chunk, 4, HeaderWord(h.WriterID, h.Count, h.Flags))
			a.lastPage = p
			return p, c, chunk, true
		}
	}
	return 0, 0, nil, false
}

// acquire gets a chunk under the writer's policy. For Stall it retries
// with back-off (8 µs doubling up to 1 ms) until the stall timeout; the
// first retry, and every other one after it, flushes pending commits
// instead of sleeping. Flushing first matters: with CommitBatched up to
// half the SMB can be written but not yet committed when the writer runs
// out of chunks, and the service can free none of it before it hears of
// it, so a writer that slept first would leave the service idle for its
// sleep (in a plugin an 8 µs sleep lasts about a millisecond: the Go runtime
// of an otherwise idle process waits for timers in epoll, whose timeout
// is in milliseconds). The cap is low because a service that frees
// chunks does so within a commit's round trip: a writer sleeping longer
// than that only loses throughput.
func (a *Arbiter) acquire(h ChunkHeader, policy BufferExhaustedPolicy) (int, uint32, []byte, error) {
	if p, c, chunk, ok := a.tryAcquire(h); ok {
		return p, c, chunk, nil
	}
	if policy != Stall {
		return 0, 0, nil, errNoChunk
	}
	start := time.Now()
	backoff := 8 * time.Microsecond
	for retry := 1; ; retry++ {
		yieldAt(siteStalled)
		if retry%2 == 1 {
			a.FlushPendingCommits()
		} else {
			time.Sleep(backoff)
			backoff = min(backoff*2, time.Millisecond)
		}
		if p, c, chunk, ok := a.tryAcquire(h); ok {
			return p, c, chunk, nil
		}
		if waited := time.Since(start); waited >= a.stallTimeout {
			return 0, 0, nil, fmt.Errorf("smb: writer %d stalled %v (%d retries) waiting for a free chunk in the SMB: %w",
				h.WriterID, waited.Round(time.Millisecond), retry, ErrStallTimeout)
		}
	}
}

var errNoChunk = errors.New("smb: no free chunk")

// ErrStallTimeout is matched (errors.Is) by the error a Stall writer
// reports when its wait for a free chunk timed out.
var ErrStallTimeout = errors.New("stall timeout")

// returnChunk marks the writer's current chunk Complete, queues its move
// and any patches that became known, and delivers if the policy says so.
func (a *Arbiter) returnChunk(w *TraceWriter) {
	a.mu.Lock()
	if _, ok := a.smb.transition(w.page, w.idx, ChunkBeingWritten, ChunkComplete); !ok {
		// Only a misbehaving service can move a chunk we own; the commit
		// below would then be rejected by the reader, which counts it.
		w.stats.returnRaces.Add(1)
	}
	yieldAt(siteReturned)
	a.pending.ChunksToMove = append(a.pending.ChunksToMove, ChunkToMove{
		Page: uint32(w.page), Chunk: w.idx, TargetBuffer: w.target,
	})
	a.pendingChunks++
	patched := a.takePatchesLocked(w)
	deliver := a.policy == CommitEachChunk || patched || a.pendingChunks*2 >= a.totalChunks
	post := !deliver && a.policy == CommitPosted && a.pendingChunks == 1
	a.mu.Unlock()
	if deliver {
		a.FlushPendingCommits()
	} else if post {
		a.onPending()
	}
}

// sendPatches queues the writer's known patches and delivers at once.
func (a *Arbiter) sendPatches(w *TraceWriter) {
	a.mu.Lock()
	patched := a.takePatchesLocked(w)
	a.mu.Unlock()
	if patched {
		a.FlushPendingCommits()
	}
}

// takePatchesLocked moves the known patches at the front of w's patch list
// into the pending request, grouping consecutive patches of one chunk.
// REQUIRES: a.mu held; called from w's goroutine.
func (a *Arbiter) takePatchesLocked(w *TraceWriter) bool {
	took := false
	cd := a.pending
	for w.patchHead < len(w.patchStore) && w.patchStore[w.patchHead].patched {
		pp := &w.patchStore[w.patchHead]
		n := len(cd.ChunksToPatch)
		if n == 0 || cd.ChunksToPatch[n-1].WriterID != w.id || cd.ChunksToPatch[n-1].ChunkID != pp.chunkID ||
			cd.ChunksToPatch[n-1].TargetBuffer != w.target {
			if n < cap(cd.ChunksToPatch) {
				cd.ChunksToPatch = cd.ChunksToPatch[:n+1]
			} else {
				cd.ChunksToPatch = append(cd.ChunksToPatch, ChunkToPatch{})
			}
			ctp := &cd.ChunksToPatch[n]
			ps := ctp.Patches[:0]
			*ctp = ChunkToPatch{TargetBuffer: w.target, WriterID: w.id, ChunkID: pp.chunkID, Patches: ps}
			n++
		}
		ctp := &cd.ChunksToPatch[n-1]
		ctp.Patches = append(ctp.Patches, Patch{Offset: pp.offset, Data: pp.data})
		ctp.HasMorePatches = false
		w.patchHead++
		took = true
	}
	if took && w.patchHead < len(w.patchStore) {
		last := &cd.ChunksToPatch[len(cd.ChunksToPatch)-1]
		last.HasMorePatches = w.patchStore[w.patchHead].chunkID == last.ChunkID
	}
	if w.patchHead == len(w.patchStore) {
		w.patchBase += len(w.patchStore)
		w.patchStore = w.patchStore[:0]
		w.patchHead = 0
	}
	return took
}

// FlushPendingCommits delivers the pending CommitData (if any) to
// OnCommit now.
func (a *Arbiter) FlushPendingCommits() {
	a.deliverMu.Lock()
	defer a.deliverMu.Unlock()
	a.mu.Lock()
	cd := a.pending
	if cd.Empty() {
		a.mu.Unlock()
		return
	}
	a.pending = a.spare
	a.pendingChunks = 0
	a.mu.Unlock()
	a.onCommit(cd)
	cd.Reset()
	a.spare = cd
}

// SendFlushAck delivers the pending CommitData together with a flush
// request id, telling the service that every chunk of this producer
// returned so far has been committed.
func (a *Arbiter) SendFlushAck(flushRequestID uint64) {
	a.mu.Lock()
	a.pending.FlushRequestID = flushRequestID
	a.mu.Unlock()
	a.FlushPendingCommits()
}
