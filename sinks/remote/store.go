package remote

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tracepipe/tracepipe/internal/wire"

	"google.golang.org/protobuf/encoding/protowire"

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

// StoreStats counts what a Store received. Safe to read at any time.
type StoreStats struct {
	Batches    atomic.Uint64 // batches appended
	Packets    atomic.Uint64
	Bytes      atomic.Uint64 // packet bytes, framing excluded
	Duplicates atomic.Uint64 // batches already stored, suppressed
	Gaps       atomic.Uint64 // batches that skipped a sequence number
	Streams    atomic.Int64  // streams open now

	Clock ClockSyncStats // clock-sync rounds (clocksync.go)
}

// Store writes received batches into trace files under one directory:
// one file per (machine, session), or with merge one file for all, each
// remote packet stamped with a small machine_id (1, 2, ... per distinct
// machine) and its trusted_packet_sequence_id remapped to a value unique
// in the file. Every file is valid at each batch boundary; its state file
// (name + ".state") records how far it is valid and the last batch of
// each stream, so that a Store reopened after a crash truncates a torn
// tail and suppresses batches its senders resend.
type Store struct {
	dir   string
	merge bool
	Stats StoreStats
	// ClockSyncSpacing is the least host time between two clock-sync
	// rounds written for one machine (0: DefaultClockSyncSpacing). Set it
	// before the first Stream.
	ClockSyncSpacing time.Duration

	mu     sync.Mutex
	traces map[string]*traceOut // by file name
}

// OpenStore returns a Store writing into dir (created if missing).
func OpenStore(dir string, merge bool) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("remote: output directory: %w", err)
	}
	return &Store{dir: dir, merge: merge, traces: map[string]*traceOut{}}, nil
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
	if s.merge {
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
	store *Store
	t     *traceOut
	st    *streamState
}

// Stream opens (or reopens) the stream of id.
func (s *Store) Stream(id Identity) (*Stream, error) {
	name := s.FileName(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.traces[name]
	if t == nil {
		var err error
		if t, err = openTrace(name, s.merge && id.Snapshot.IsZero()); err != nil {
			return nil, err
		}
		s.traces[name] = t
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.stream(id)
	t.refs++
	s.Stats.Streams.Add(1)
	return &Stream{store: s, t: t, st: st}, nil
}

// LastSeq is the highest batch number stored for this stream (0: none).
func (st *Stream) LastSeq() uint64 {
	st.t.mu.Lock()
	defer st.t.mu.Unlock()
	return st.st.lastSeq
}

// Release ends this handle's use of the stream. When no handle is left,
// a per-session file is closed (a long-running receiver must not keep one
// open per session it ever saw); a sender that reconnects reopens it,
// continuing from its state file. The merged file stays open.
func (st *Stream) Release() {
	s, t := st.store, st.t
	s.Stats.Streams.Add(-1)
	s.mu.Lock()
	defer s.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refs--
	if t.refs > 0 || t.merge || s.traces[t.name] != t {
		return
	}
	delete(s.traces, t.name)
	if t.err == nil {
		t.err = errors.New("remote: stream released")
	}
	_ = t.f.Close()
	_ = t.state.Close()
}

// Append stores batch seq (Trace records in data holding packets packets
// of nbytes bytes, as counted by CheckRecords) unless it was stored before, in which case it reports
// false. When Append returns, the batch is in the OS's hands and may be
// acknowledged.
func (st *Stream) Append(seq uint64, data []byte, packets int, nbytes uint64) (bool, error) {
	t := st.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return false, t.err
	}
	if seq <= st.st.lastSeq {
		st.store.Stats.Duplicates.Add(1)
		return false, nil
	}
	if seq != st.st.lastSeq+1 {
		st.store.Stats.Gaps.Add(1)
	}
	out := data
	if t.merge {
		if err := t.markMachine(st.st.machineIdx); err != nil { // clocksync.go
			return false, err
		}
		t.scratch = t.scratch[:0]
		err := WalkRecords(data, func(p []byte) error {
			info, err := tracefile.DecodePacket(p)
			if err != nil {
				return err
			}
			id := st.st.remap(t, info.SequenceID)
			extra := 1 + protowire.SizeVarint(uint64(id)) + 2 + protowire.SizeVarint(uint64(st.st.machineIdx))
			t.scratch = tracefile.AppendRecordHeader(t.scratch, len(p)+extra)
			t.scratch = append(t.scratch, p...)
			// The last occurrence of a field wins: appending is enough.
			t.scratch = wire.AppendVarint(t.scratch, tracefile.FieldTrustedSequenceID, uint64(id))
			t.scratch = wire.AppendVarint(t.scratch, tracefile.FieldMachineID, uint64(st.st.machineIdx))
			return nil
		})
		if err != nil {
			return false, err
		}
		out = t.scratch
	}
	if _, err := t.f.WriteAt(out, t.off); err != nil {
		t.err = fmt.Errorf("remote: %s: write: %w", t.name, err)
		return false, t.err
	}
	t.off += int64(len(out))
	st.st.lastSeq = seq
	if err := t.saveState(); err != nil {
		t.err = err
		return false, err
	}
	st.store.Stats.Batches.Add(1)
	st.store.Stats.Packets.Add(uint64(packets))
	st.store.Stats.Bytes.Add(nbytes)
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
		errs = append(errs, t.f.Close(), t.state.Close())
		t.err = errors.New("remote: store closed")
		t.mu.Unlock()
		delete(s.traces, name)
	}
	return errors.Join(errs...)
}

// traceOut is one trace file and its state.
type traceOut struct {
	name  string
	merge bool

	mu        sync.Mutex // guards everything below
	f, state  *os.File
	off       int64 // the file is valid up to here
	streams   []*streamState
	machines  map[uint64]uint32 // merge: machine id → machine_id field
	nextSeqID uint32            // merge: next remapped sequence id
	scratch   []byte
	stateBuf  []byte
	err       error // sticky write error
	refs      int   // Stream handles open

	sync map[uint32]*machineSync // merge: clock sync per machine_id (clocksync.go)
}

// streamState is what the state file keeps of one stream.
type streamState struct {
	machine    uint64
	session    [16]byte
	lastSeq    uint64
	machineIdx uint32
	seqs       []seqPair // merge: original → remapped sequence id
}

type seqPair struct{ from, to uint32 }

// remap returns the merged file's sequence id for the stream's id.
func (ss *streamState) remap(t *traceOut, from uint32) uint32 {
	for _, p := range ss.seqs {
		if p.from == from {
			return p.to
		}
	}
	to := t.nextSeqID
	t.nextSeqID++
	ss.seqs = append(ss.seqs, seqPair{from, to})
	return to
}

func (t *traceOut) stream(id Identity) *streamState {
	for _, st := range t.streams {
		if st.machine == id.Machine && st.session == id.Session {
			return st
		}
	}
	st := &streamState{machine: id.Machine, session: id.Session}
	if t.merge {
		idx, ok := t.machines[id.Machine]
		if !ok {
			idx = uint32(len(t.machines) + 1)
			t.machines[id.Machine] = idx
		}
		st.machineIdx = idx
	}
	t.streams = append(t.streams, st)
	return st
}

func openTrace(name string, merge bool) (*traceOut, error) {
	t := &traceOut{name: name, merge: merge, machines: map[uint64]uint32{}, nextSeqID: 2}
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("remote: %w", err)
	}
	sf, err := os.OpenFile(name+".state", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("remote: %w", err)
	}
	t.f, t.state = f, sf
	raw, err := io.ReadAll(io.LimitReader(sf, maxStateSize+1))
	if err == nil && len(raw) > 0 {
		err = t.decodeState(raw)
	}
	if err == nil {
		// Anything past the recorded offset is a batch torn by a crash,
		// or one written but not recorded: its sender resends it.
		err = f.Truncate(t.off)
	}
	if err == nil && merge && t.off == 0 {
		err = t.writeHostPreamble() // clocksync.go
	}
	if err != nil {
		f.Close()
		sf.Close()
		return nil, fmt.Errorf("remote: %s: %w", name+".state", err)
	}
	for _, st := range t.streams {
		if merge {
			t.machines[st.machine] = st.machineIdx
		}
	}
	return t, nil
}

// State file layout (little endian): "TPST" version:u32 length:u32, then
// length bytes: offset:u64 nextSeqID:u32 streams:u32, per stream machine:u64
// session:[16] lastSeq:u64 machineIdx:u32 pairs:u32 (from:u32 to:u32)*.
// It is rewritten in place with one pwrite after each batch; the length
// makes a shorter rewrite ignore the old tail.
const (
	stateMagic   = "TPST"
	stateVersion = 1
	maxStateSize = 16 << 20
)

var errBadState = errors.New("malformed state file")

func (t *traceOut) saveState() error {
	b := append(t.stateBuf[:0], stateMagic...)
	b = binary.LittleEndian.AppendUint32(b, stateVersion)
	b = binary.LittleEndian.AppendUint32(b, 0) // length, set below
	b = binary.LittleEndian.AppendUint64(b, uint64(t.off))
	b = binary.LittleEndian.AppendUint32(b, t.nextSeqID)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(t.streams)))
	for _, st := range t.streams {
		b = binary.LittleEndian.AppendUint64(b, st.machine)
		b = append(b, st.session[:]...)
		b = binary.LittleEndian.AppendUint64(b, st.lastSeq)
		b = binary.LittleEndian.AppendUint32(b, st.machineIdx)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(st.seqs)))
		for _, p := range st.seqs {
			b = binary.LittleEndian.AppendUint32(b, p.from)
			b = binary.LittleEndian.AppendUint32(b, p.to)
		}
	}
	binary.LittleEndian.PutUint32(b[8:], uint32(len(b)-12))
	t.stateBuf = b
	if _, err := t.state.WriteAt(b, 0); err != nil {
		return fmt.Errorf("remote: %s.state: %w", t.name, err)
	}
	return nil
}

// decodeState parses a state file (untrusted: it is on disk).
func (t *traceOut) decodeState(raw []byte) error {
	if len(raw) > maxStateSize {
		return fmt.Errorf("%w: larger than %d bytes", errBadState, maxStateSize)
	}
	if len(raw) < 12 || string(raw[:4]) != stateMagic {
		return fmt.Errorf("%w: no %q header", errBadState, stateMagic)
	}
	if v := binary.LittleEndian.Uint32(raw[4:]); v != stateVersion {
		return fmt.Errorf("%w: version %d, want %d", errBadState, v, stateVersion)
	}
	n := binary.LittleEndian.Uint32(raw[8:])
	if uint64(n) > uint64(len(raw)-12) {
		return fmt.Errorf("%w: length %d overruns the file (%d bytes)", errBadState, n, len(raw))
	}
	d := decoder{b: raw[12 : 12+n], off: 12}
	off := d.u64()
	t.nextSeqID = d.u32()
	ns := d.u32()
	for i := uint32(0); i < ns && d.err == nil; i++ {
		st := &streamState{machine: d.u64()}
		copy(st.session[:], d.bytes(16))
		st.lastSeq = d.u64()
		st.machineIdx = d.u32()
		np := d.u32()
		if uint64(np)*8 > uint64(len(d.b)) {
			d.fail("sequence map of %d entries", np)
			break
		}
		for j := uint32(0); j < np; j++ {
			st.seqs = append(st.seqs, seqPair{d.u32(), d.u32()})
		}
		t.streams = append(t.streams, st)
	}
	if d.err != nil {
		t.streams = nil
		return d.err
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", errBadState, len(d.b))
	}
	if off > 1<<62 {
		return fmt.Errorf("%w: offset %d", errBadState, off)
	}
	t.off = int64(off)
	return nil
}

// decoder reads little-endian fields, remembering the first overrun.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: offset %d: %s", errBadState, d.off, fmt.Sprintf(format, args...))
	}
	d.b = nil
}

func (d *decoder) bytes(n int) []byte {
	if len(d.b) < n {
		d.fail("truncated")
		return make([]byte, n)
	}
	v := d.b[:n]
	d.b, d.off = d.b[n:], d.off+n
	return v
}

func (d *decoder) u64() uint64 { return binary.LittleEndian.Uint64(d.bytes(8)) }
func (d *decoder) u32() uint32 { return binary.LittleEndian.Uint32(d.bytes(4)) }
