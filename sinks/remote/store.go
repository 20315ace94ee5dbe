package remote

import (
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/tracefile"
)

// Identity names one sender's session: the host it runs on and the
// session's random id.
type Identity struct {
	Machine  uint64   // stable per host (see MachineID)
	Session  [16]byte // random per session
	Hostname string   // informational; part of the file name
	// Snapshot, when not zero, says the stream is a clone snapshot of
	// the session Snapshot.Of (Session is the snapshot's own uuid): it
	// goes to a file of its own, even when merging.
	Snapshot sinks.Snapshot
}

// SessionString is the session id as 32 hex digits.
func (id Identity) SessionString() string { return hex.EncodeToString(id.Session[:]) }

// MergedName is the file a merging Store writes in its directory.
const MergedName = "merged.pftrace"

// Defaults of StoreOptions' limits.
const (
	// DefaultMaxSequences bounds the sequence ids one stream may bring
	// into a merged file (each costs a map entry and 8 bytes of state).
	DefaultMaxSequences = 8192
	// DefaultSeqWindow bounds how far ahead of the last stored batch a
	// batch number may be: a sender's numbers have no gaps of their own
	// (a sink that drops packets drops them before numbering), so a jump
	// of a million batches is a broken or hostile peer, not loss.
	DefaultSeqWindow = 1 << 20
	// DefaultMaxSessionsPerMachine bounds the sessions of one machine id
	// attached at once.
	DefaultMaxSessionsPerMachine = 64
)

// StoreOptions configure a Store. Zero values take the defaults above.
type StoreOptions struct {
	// Merge writes one merged trace for every machine (see Store).
	Merge bool
	// MaxSequences bounds the distinct sequence ids of one stream in a
	// merged file; a batch that would exceed it is refused.
	MaxSequences int
	// SeqWindow bounds how far beyond the last stored batch a batch
	// number may jump; a batch beyond it is refused and the stream
	// continues as if it never came.
	SeqWindow uint64
	// MaxSessionsPerMachine bounds the sessions of one machine id
	// attached at once; one more is refused.
	MaxSessionsPerMachine int
	// DiskBudget, when positive, bounds the bytes of the files in the
	// directory (what was there when the store opened included); a batch
	// that would exceed it is refused.
	DiskBudget int64
	// Logger receives one line the first time each limit is hit. Nil
	// discards.
	Logger *slog.Logger
}

// ErrRefused is wrapped by every error about a batch or a session the
// Store would not take because of a limit; the store itself is fine and
// other streams go on. The specific errors below wrap it.
var ErrRefused = errors.New("remote: refused")

var (
	// ErrSeqWindow: a batch numbered beyond the window.
	ErrSeqWindow = fmt.Errorf("%w: batch number beyond the window", ErrRefused)
	// ErrTooManySequences: a batch bringing more sequence ids than the
	// limit into a merged file.
	ErrTooManySequences = fmt.Errorf("%w: too many sequence ids", ErrRefused)
	// ErrDiskBudget: storing the batch would exceed the disk budget.
	ErrDiskBudget = fmt.Errorf("%w: disk budget exhausted", ErrRefused)
	// ErrTooManySessions: one machine has too many sessions attached.
	ErrTooManySessions = fmt.Errorf("%w: too many sessions of one machine", ErrRefused)
)

// StoreStats counts what a Store received. Safe to read at any time.
type StoreStats struct {
	Batches atomic.Uint64 // batches appended
	Packets atomic.Uint64 // senders' packets appended
	// ReceiverPackets counts the receiver packets the store wrote itself
	// (its account of a session after each sender TraceStats or gap).
	ReceiverPackets atomic.Uint64
	Bytes           atomic.Uint64 // packet bytes, framing excluded
	Duplicates      atomic.Uint64 // batches already stored, suppressed
	Gaps            atomic.Uint64 // batches that skipped a sequence number
	Missing         atomic.Uint64 // batch numbers skipped by those gaps
	Streams         atomic.Int64  // streams open now
	// Refusals, by limit.
	RefusedWindow    atomic.Uint64 // batches numbered beyond SeqWindow
	RefusedSequences atomic.Uint64 // batches over MaxSequences
	RefusedDisk      atomic.Uint64 // batches over DiskBudget
	RefusedSessions  atomic.Uint64 // sessions over MaxSessionsPerMachine
	DiskBytes        atomic.Int64  // bytes of the files in the directory (as the store counts them)

	Clock ClockSyncStats // clock-sync rounds (clocksync.go)
}

// Store writes received batches into trace files under one directory:
// one file per (machine, session), or with merge one file for all, each
// remote packet stamped with a small machine_id (1, 2, ... per distinct
// machine) and its trusted_packet_sequence_id remapped to a value unique
// in the file. Every file is valid at each batch boundary; its state file
// (name + ".state") records how far it is valid and the last batch of
// each stream, so that a Store reopened after a crash truncates a torn
// tail and suppresses batches its senders resend. A file and its state
// are created by the first batch: a session that never sends one leaves
// nothing behind.
//
// Locks: Store.mu guards the table of open files and the session counts
// and is never held while waiting for a file's lock held by another
// stream; each file's traceOut.mu serialises the streams writing it.
type Store struct {
	dir   string
	opts  StoreOptions
	Stats StoreStats
	// ClockSyncSpacing is the least host time between two clock-sync
	// rounds written for one machine (0: DefaultClockSyncSpacing). Set it
	// before the first Stream.
	ClockSyncSpacing time.Duration

	mu       sync.Mutex
	traces   map[string]*traceOut    // by file name
	attached map[streamKey]int       // handles per stream
	machines map[uint64]int          // attached streams per machine id
	once     [limitCount]atomic.Bool // each limit logged once
}

type streamKey struct {
	machine uint64
	session [16]byte
}

func keyOf(id Identity) streamKey { return streamKey{id.Machine, id.Session} }

// The limits a Store logs the first time they are hit.
const (
	limitWindow = iota
	limitSequences
	limitDisk
	limitSessions
	limitCount
)

// OpenStore returns a Store writing into dir (created if missing) with
// the default limits.
func OpenStore(dir string, merge bool) (*Store, error) {
	return OpenStoreOptions(dir, StoreOptions{Merge: merge})
}

// OpenStoreOptions returns a Store writing into dir (created if missing).
func OpenStoreOptions(dir string, opts StoreOptions) (*Store, error) {
	if opts.MaxSequences <= 0 {
		opts.MaxSequences = DefaultMaxSequences
	}
	if opts.SeqWindow == 0 {
		opts.SeqWindow = DefaultSeqWindow
	}
	if opts.MaxSessionsPerMachine <= 0 {
		opts.MaxSessionsPerMachine = DefaultMaxSessionsPerMachine
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("remote: output directory: %w", err)
	}
	s := &Store{dir: dir, opts: opts, traces: map[string]*traceOut{}, attached: map[streamKey]int{}, machines: map[uint64]int{}}
	if opts.DiskBudget > 0 {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("remote: output directory: %w", err)
		}
		var used int64
		for _, e := range ents {
			if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
				used += info.Size()
			}
		}
		s.Stats.DiskBytes.Store(used)
	}
	return s, nil
}

// Options returns the store's options with the defaults filled in.
func (s *Store) Options() StoreOptions { return s.opts }

// limitHit logs the first time limit is hit.
func (s *Store) limitHit(limit int, format string, args ...any) {
	if s.once[limit].CompareAndSwap(false, true) {
		sinks.Logf(s.opts.Logger, slog.LevelWarn, format+" (logged once; counted in /metrics)", args...)
	}
}

// FileName is the trace file of id (merged.pftrace when merging). A
// snapshot's is named by sinks.DefaultSnapshotPattern beside its live
// session's per-session file
// (<host>-<machine>-<session>.snap-<n>-<trigger>.pftrace), merging or not:
// a snapshot repeats what the live trace holds, so it is never merged
// into it.
func (s *Store) FileName(id Identity) string {
	if !id.Snapshot.IsZero() {
		live := id
		live.Session, live.Snapshot = id.Snapshot.Of, sinks.Snapshot{}
		return sinks.SnapshotName(sinks.DefaultSnapshotPattern, s.sessionFile(live), id.Snapshot.N, id.Snapshot.Trigger)
	}
	if s.opts.Merge {
		return filepath.Join(s.dir, MergedName)
	}
	return s.sessionFile(id)
}

// sessionFile is id's per-session file.
func (s *Store) sessionFile(id Identity) string {
	return filepath.Join(s.dir, fmt.Sprintf("%s-%016x-%s.pftrace", safeName(id.Hostname), id.Machine, id.SessionString()))
}

// safeName keeps a hostname usable as part of a file name.
func safeName(h string) string {
	if h == "" {
		h = "unknown"
	}
	if len(h) > 64 {
		h = h[:64]
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.', r == '_':
			return r
		}
		return '_'
	}, h)
}

// Stream is one sender session's way into its trace file. It is safe for
// concurrent use (a sender that reconnects may briefly have two).
type Stream struct {
	store    *Store
	t        *traceOut
	st       *streamState
	key      streamKey
	released atomic.Bool
}

// Stream opens (or reopens) the stream of id. It creates no file: the
// first batch does. A machine with MaxSessionsPerMachine sessions
// attached gets ErrTooManySessions.
func (s *Store) Stream(id Identity) (*Stream, error) {
	name := s.FileName(id)
	key := keyOf(id)
	s.mu.Lock()
	if s.attached[key] == 0 && s.machines[id.Machine] >= s.opts.MaxSessionsPerMachine {
		s.mu.Unlock()
		s.Stats.RefusedSessions.Add(1)
		s.limitHit(limitSessions, "remote: machine %016x (%s) has %d sessions attached, the limit (--max-sessions-per-machine); refusing more", id.Machine, id.Hostname, s.opts.MaxSessionsPerMachine)
		return nil, fmt.Errorf("%w: machine %016x already has %d sessions attached", ErrTooManySessions, id.Machine, s.opts.MaxSessionsPerMachine)
	}
	t := s.traces[name]
	if t == nil {
		var err error
		if t, err = openTrace(name, s.opts.Merge && id.Snapshot.IsZero()); err != nil {
			s.mu.Unlock()
			return nil, err
		}
		s.traces[name] = t
	}
	t.refs++
	if s.attached[key] == 0 {
		s.machines[id.Machine]++
	}
	s.attached[key]++
	s.mu.Unlock()

	t.mu.Lock()
	st := t.stream(id)
	st.handles++
	t.mu.Unlock()
	s.Stats.Streams.Add(1)
	return &Stream{store: s, t: t, st: st, key: key}, nil
}

// LastSeq is the highest batch number stored for this stream (0: none).
func (st *Stream) LastSeq() uint64 {
	st.t.mu.Lock()
	defer st.t.mu.Unlock()
	return st.st.lastSeq
}

// CheckWindow returns an error wrapping ErrSeqWindow when seq lies beyond
// the window after the last stored batch (and counts the refusal).
func (st *Stream) CheckWindow(seq uint64) error {
	st.t.mu.Lock()
	defer st.t.mu.Unlock()
	return st.checkWindowLocked(seq)
}

func (st *Stream) checkWindowLocked(seq uint64) error {
	last, w := st.st.lastSeq, st.store.opts.SeqWindow
	if seq <= last || seq-last <= w {
		return nil
	}
	st.st.recv.BatchesRefused++
	st.st.unreported = true
	st.store.Stats.RefusedWindow.Add(1)
	st.store.limitHit(limitWindow, "remote: session %s of %s: batch %d is more than %d (--seq-window) beyond the last stored batch %d; refused", hex.EncodeToString(st.st.session[:]), st.st.hostname, seq, w, last)
	return fmt.Errorf("%w: batch %d is more than %d beyond the last stored batch %d", ErrSeqWindow, seq, w, last)
}

// Release ends this handle's use of the stream. When the stream's last
// handle goes and batches were refused since its last receiver packet, a
// receiver packet records them. When no handle of a per-session file is left, the file is
// closed (a long-running receiver must not keep one open per session it
// ever saw); a sender that reconnects reopens it, continuing from its
// state file. The merged file stays open. Release twice is a no-op.
func (st *Stream) Release() {
	if !st.released.CompareAndSwap(false, true) {
		return
	}
	s, t := st.store, st.t
	s.Stats.Streams.Add(-1)
	t.mu.Lock()
	st.st.handles--
	if st.st.handles == 0 {
		if st.st.unreported && st.st.registered && t.err == nil {
			t.err = t.writeReceiverPacket(s, st.st, nil)
		}
		if !st.st.registered {
			delete(t.byKey, st.key) // never stored a batch: nothing to remember
		}
	}
	t.mu.Unlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.attached[st.key]--; s.attached[st.key] == 0 {
		delete(s.attached, st.key)
		if s.machines[st.key.machine]--; s.machines[st.key.machine] == 0 {
			delete(s.machines, st.key.machine)
		}
	}
	t.refs--
	if t.refs > 0 || t.merge || s.traces[t.name] != t {
		return
	}
	delete(s.traces, t.name)
	// No handle is left, so nobody waits for t.mu: closing here holds
	// the store lock only for the close itself.
	t.mu.Lock()
	t.closeLocked(errors.New("remote: stream released"))
	t.mu.Unlock()
}

// Append stores batch seq (Trace records in data holding packets packets
// of nbytes bytes, as counted by CheckRecords) unless it was stored before, in which case it reports
// false. When Append returns, the batch is in the OS's hands and may be
// acknowledged. A batch refused by a limit returns an error wrapping
// ErrRefused; the stream stays usable.
func (st *Stream) Append(seq uint64, data []byte, packets int, nbytes uint64) (bool, error) {
	t, s, ss := st.t, st.store, st.st
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return false, t.err
	}
	if seq <= ss.lastSeq {
		ss.recv.BatchesDuplicated++
		s.Stats.Duplicates.Add(1)
		return false, nil
	}
	if err := st.checkWindowLocked(seq); err != nil {
		return false, err
	}
	mark := ss.mark(t)
	out, err := t.prepare(s, ss, data)
	if err != nil {
		ss.rollback(t, mark)
		if errors.Is(err, ErrTooManySequences) {
			ss.recv.BatchesRefused++
			ss.unreported = true
			s.Stats.RefusedSequences.Add(1)
			s.limitHit(limitSequences, "remote: session %s of %s brings more than %d sequence ids (--max-sequences) into the merged file; batch refused", hex.EncodeToString(ss.session[:]), ss.hostname, s.opts.MaxSequences)
		}
		return false, err
	}
	if b := s.opts.DiskBudget; b > 0 && s.Stats.DiskBytes.Load()+int64(len(out))+int64(len(t.stateBuf))+receiverPacketSlack > b {
		ss.rollback(t, mark)
		ss.recv.BatchesRefused++
		ss.unreported = true
		s.Stats.RefusedDisk.Add(1)
		s.limitHit(limitDisk, "remote: %s: the files hold %d bytes; batch %d of %d bytes would pass the disk budget of %d bytes (--max-disk); refusing batches", t.name, s.Stats.DiskBytes.Load(), seq, len(out), b)
		return false, fmt.Errorf("%w: %d bytes stored, budget %d", ErrDiskBudget, s.Stats.DiskBytes.Load(), b)
	}
	if err := t.ensureFiles(s); err != nil {
		ss.rollback(t, mark)
		t.err = err
		return false, err
	}
	if t.merge {
		if err := t.markMachine(s, ss.machineIdx); err != nil { // clocksync.go
			return false, err
		}
	}
	gap := seq != ss.lastSeq+1
	if !ss.registered {
		ss.registered = true
		t.streams = append(t.streams, ss)
	}
	if _, err := t.f.WriteAt(out, t.off); err != nil {
		t.err = fmt.Errorf("remote: %s: write: %w", t.name, err)
		return false, t.err
	}
	t.off += int64(len(out))
	s.Stats.DiskBytes.Add(int64(len(out)))
	if len(ss.pending) > 0 {
		ss.lastStats = append(ss.lastStats[:0], ss.pending...)
	}
	if gap {
		missing := seq - ss.lastSeq - 1
		ss.recv.Gaps++
		ss.recv.BatchesMissing += missing
		if len(ss.recv.GapRanges) < tracefile.MaxGapRanges {
			ss.recv.GapRanges = append(ss.recv.GapRanges, tracefile.GapRange{From: ss.lastSeq + 1, To: seq - 1})
		}
		s.Stats.Gaps.Add(1)
		s.Stats.Missing.Add(missing)
	}
	ss.lastSeq = seq
	ss.recv.BatchesStored++
	ss.recv.PacketsStored += uint64(packets)
	ss.recv.BytesStored += nbytes
	s.Stats.Batches.Add(1)
	s.Stats.Packets.Add(uint64(packets))
	s.Stats.Bytes.Add(nbytes)
	if gap || len(ss.pending) > 0 || ss.unreported {
		// The receiver's account follows each TraceStats of the sender
		// (so that the last packet of a session's file says what the
		// file holds), and a gap or refusal goes into the trace at once,
		// so that a reader sees it even if the session never ends.
		if err := t.writeReceiverPacket(s, ss, nil); err != nil {
			t.err = err
			return false, err
		}
		return true, nil
	}
	if err := t.saveState(s); err != nil {
		t.err = err
		return false, err
	}
	return true, nil
}

// Close closes every file. The state files stay: a Store opened later on
// the same directory continues the traces.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for name, t := range s.traces {
		t.mu.Lock()
		errs = append(errs, t.closeLocked(errors.New("remote: store closed")))
		t.mu.Unlock()
		delete(s.traces, name)
	}
	return errors.Join(errs...)
}
