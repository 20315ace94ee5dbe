package remote

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tracepipe/tracepipe/internal/wire"
	"github.com/tracepipe/tracepipe/tracefile"
)

// Clock synchronisation of merged traces (trace-processor-import.md §9).
//
// A merged file is laid out as Perfetto's own multi-machine traces are:
// the receiver (serve) is the host. Its own packets carry no machine_id
// and come first: a clock_snapshot of its clocks (primary trace clock
// BOOTTIME) and its system_info, on sequence 1. Because the host has data
// before any remote packet, trace_processor adopts no sender as the host:
// every sender is a remote machine whose BOOTTIME it must relate to the
// host's, which is what one remote_clock_sync packet per measured round
// does (machine_id set, no sequence id, like traced's). The senders' own
// clock snapshots stay in their streams, scoped to their machine.
//
// Per-session files are single-machine traces and get none of this.

// Clock-sync bounds. Every field of a round comes from the network.
const (
	// MaxSyncClocks bounds the clocks of one snapshot in a round.
	MaxSyncClocks = 16
	// MaxSyncRoundTrip is the longest round kept: trace_processor pairs
	// the halves of a round only when they are less than 30 s apart.
	MaxSyncRoundTrip = 30 * time.Second
	// DefaultClockSyncSpacing is the least host time between two rounds
	// written for one machine (Store.ClockSyncSpacing).
	DefaultClockSyncSpacing = 10 * time.Second
	// syncSlack is the round-trip slack over twice the best round trip of
	// a machine within which a later round is still written.
	syncSlack = time.Millisecond
	// staleSpacing: after this many spacings without a round written, a
	// congested round is written anyway, so that the host's readings keep
	// up with the session (check judges remote timestamps against them).
	staleSpacing = 5
)

// ErrBadClockRound is wrapped by every error about a round's contents.
var ErrBadClockRound = errors.New("remote: malformed clock-sync round")

// ClockSyncStats counts the clock-sync rounds a Store received.
type ClockSyncStats struct {
	Rounds  atomic.Uint64 // written into a merged file as remote_clock_sync
	Skipped atomic.Uint64 // valid but not written: too soon after the last, or congested
}

// ClockRound is one round of clock synchronisation measured over a
// sender's connection, in the order the snapshots were taken: Client1
// before sending a ping, Host1 when the ping arrived, Client2 when the
// answer to the ping arrived, Host2 when the update carrying Client2
// arrived. Clock ids are builtin clocks (1..63).
type ClockRound struct {
	Client1, Host1, Client2, Host2 []tracefile.Clock
}

// Validate checks a round whose client halves came from the network:
// 1..MaxSyncClocks clocks each, builtin ids, none twice, BOOTTIME in all
// four, timestamps that fit an int64, and client and host BOOTTIME that
// do not run backwards within the round.
func (r *ClockRound) Validate() error {
	for i, s := range [...][]tracefile.Clock{r.Client1, r.Host1, r.Client2, r.Host2} {
		if err := ValidateClocks(s); err != nil {
			return fmt.Errorf("%w: snapshot %d: %w", ErrBadClockRound, i+1, err)
		}
	}
	c1, _ := ClockValue(r.Client1, tracefile.ClockBoottime)
	c2, _ := ClockValue(r.Client2, tracefile.ClockBoottime)
	h1, _ := ClockValue(r.Host1, tracefile.ClockBoottime)
	h2, _ := ClockValue(r.Host2, tracefile.ClockBoottime)
	if c2 < c1 {
		return fmt.Errorf("%w: client BOOTTIME runs backwards (%d then %d)", ErrBadClockRound, c1, c2)
	}
	if h2 < h1 {
		return fmt.Errorf("%w: host BOOTTIME runs backwards (%d then %d)", ErrBadClockRound, h1, h2)
	}
	return nil
}

// ValidateClocks checks one snapshot of a round: 1..MaxSyncClocks clocks,
// builtin ids (1..63), none twice, BOOTTIME among them, timestamps that
// fit an int64.
func ValidateClocks(s []tracefile.Clock) error {
	if len(s) == 0 || len(s) > MaxSyncClocks {
		return fmt.Errorf("%d clocks, want 1 to %d", len(s), MaxSyncClocks)
	}
	var seen uint64
	boot := false
	for _, c := range s {
		if c.ID == 0 || c.ID >= 64 {
			return fmt.Errorf("clock id %d is not a builtin clock (1..63)", c.ID)
		}
		if seen&(1<<c.ID) != 0 {
			return fmt.Errorf("clock %d listed twice", c.ID)
		}
		seen |= 1 << c.ID
		if c.Timestamp > 1<<63-1 {
			return fmt.Errorf("clock %d timestamp %d overflows int64", c.ID, c.Timestamp)
		}
		boot = boot || c.ID == tracefile.ClockBoottime
	}
	if !boot {
		return errors.New("no BOOTTIME (6)")
	}
	return nil
}

// ClockValue returns clock id's timestamp in snapshot s.
func ClockValue(s []tracefile.Clock, id uint32) (uint64, bool) {
	for _, c := range s {
		if c.ID == id {
			return c.Timestamp, true
		}
	}
	return 0, false
}

// RoundTrip is the round's duration on the client's BOOTTIME (Client2 −
// Client1): the bound on the error of the offsets it yields.
func (r *ClockRound) RoundTrip() time.Duration {
	c1, _ := ClockValue(r.Client1, tracefile.ClockBoottime)
	c2, _ := ClockValue(r.Client2, tracefile.ClockBoottime)
	return time.Duration(c2 - c1)
}

// ReadClocks appends this machine's clocks to dst, BOOTTIME first (it is
// the clock that matters, so it is read closest to the event), then the
// others in the order Perfetto's service lists them.
func ReadClocks(dst []tracefile.Clock) []tracefile.Clock {
	return append(dst,
		tracefile.Clock{ID: tracefile.ClockBoottime, Timestamp: clockNanos(unix.CLOCK_BOOTTIME)},
		tracefile.Clock{ID: tracefile.ClockRealtimeCoarse, Timestamp: clockNanos(unix.CLOCK_REALTIME_COARSE)},
		tracefile.Clock{ID: tracefile.ClockMonotonicCoarse, Timestamp: clockNanos(unix.CLOCK_MONOTONIC_COARSE)},
		tracefile.Clock{ID: tracefile.ClockRealtime, Timestamp: clockNanos(unix.CLOCK_REALTIME)},
		tracefile.Clock{ID: tracefile.ClockMonotonic, Timestamp: clockNanos(unix.CLOCK_MONOTONIC)},
		tracefile.Clock{ID: tracefile.ClockMonotonicRaw, Timestamp: clockNanos(unix.CLOCK_MONOTONIC_RAW)},
	)
}

func clockNanos(id int32) uint64 {
	var ts unix.Timespec
	if unix.ClockGettime(id, &ts) != nil {
		return 0
	}
	return uint64(ts.Nano())
}

// machineSync is what a merged file remembers of one machine's rounds.
type machineSync struct {
	lastHost uint64        // host BOOTTIME of the last round written
	best     time.Duration // shortest round trip seen
	rounds   uint64        // valid rounds seen
	written  uint64        // rounds written
	marked   bool          // the machine's marker packet is in the file
	// pending holds the machine's first round (its remote_clock_sync and
	// marker records) measured before the merged file existed: the file
	// is created by a first batch only, so the round waits for it.
	pending []byte
}

// machine returns the clock-sync state of machine idx. REQUIRES: t.mu held.
func (t *traceOut) machine(idx uint32) *machineSync {
	if t.sync == nil {
		t.sync = map[uint32]*machineSync{}
	}
	ms := t.sync[idx]
	if ms == nil {
		ms = &machineSync{}
		t.sync[idx] = ms
	}
	return ms
}

// The marker packet of a machine is the first timestamped packet of that
// machine in a merged file, placed after its first remote_clock_sync and
// before anything the sender wrote: machine_id, timestamp (the machine's
// BOOTTIME), timestamp_clock_id BOOTTIME, no payload.
//
// It exists because of how trace_processor (ec5d16b) handles a remote
// machine's own clock snapshots: every clock_snapshot naming BOOTTIME
// makes that machine's BOOTTIME the trace clock of the whole trace unless
// the machine's clock tracker has already converted a timestamp. The
// senders' streams open with their clock snapshot, so without the marker
// each new machine would take the trace clock away from the host, and
// the host's (and other machines') later packets would have no path to it
// (clock_sync_failure_no_path: the loss seen in merged traces before
// clock sync). The marker's conversion, through the remote_clock_sync
// just before it, pins the trace clock to the host. A machine that never
// sent a round still gets one (timestamped with the host's BOOTTIME)
// before its first batch: trace_processor then assumes its BOOTTIME is
// the host's, which `tracepipe check` reports, instead of losing other
// machines' packets.
func appendMarkerPacket(dst []byte, machine uint32, boottime uint64) []byte {
	var pkt [32]byte
	p := wire.AppendInt32(pkt[:0], tracefile.FieldTrustedUID, int32(os.Getuid()))
	p = wire.AppendVarint(p, tracefile.FieldMachineID, uint64(machine))
	p = tracefile.AppendTimestamp(p, boottime)
	p = wire.AppendVarint(p, tracefile.FieldTimestampClockID, tracefile.ClockBoottime)
	return tracefile.AppendRecord(dst, p)
}

// markMachine writes machine idx's marker packet unless it is in the file
// (see appendMarkerPacket), after the machine's first round when that came
// before the file existed: Append calls it before a merged batch.
// REQUIRES: t.mu held.
func (t *traceOut) markMachine(s *Store, idx uint32) error {
	ms := t.machine(idx)
	if ms.marked {
		return nil
	}
	if ms.pending != nil {
		if err := t.appendPackets(s, ms.pending); err != nil {
			return err
		}
		ms.pending, ms.marked = nil, true
		return nil
	}
	var buf [64]byte
	var clocks [8]tracefile.Clock
	if err := t.appendPackets(s, appendMarkerPacket(buf[:0], idx, ReadClocks(clocks[:0])[0].Timestamp)); err != nil {
		return err
	}
	ms.marked = true
	return nil
}

// Merged reports whether the stream's packets go into a merged file.
func (st *Stream) Merged() bool { return st.t.merge }

// ClockSync records a round measured on the stream's connection. Into a
// merged file it writes the round as a remote_clock_sync packet of the
// stream's machine when it is the machine's first, or when at least
// Store.ClockSyncSpacing of host time passed since the last one written
// and its round trip is within twice the best seen plus 1 ms (a congested
// round's estimate is worse than the drift it would correct) or five
// spacings passed without a round written. Per-session
// files ignore rounds. It reports whether the round was written; an
// invalid round is an error and writes nothing.
func (st *Stream) ClockSync(r *ClockRound) (bool, error) {
	if err := r.Validate(); err != nil {
		return false, err
	}
	t := st.t
	if !t.merge {
		return false, nil
	}
	rtt := r.RoundTrip()
	if rtt >= MaxSyncRoundTrip {
		st.store.Stats.Clock.Skipped.Add(1)
		return false, nil
	}
	spacing := st.store.ClockSyncSpacing
	if spacing <= 0 {
		spacing = DefaultClockSyncSpacing
	}
	h1, _ := ClockValue(r.Host1, tracefile.ClockBoottime)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return false, t.err
	}
	ms := t.machine(st.st.machineIdx)
	if ms.rounds == 0 || rtt < ms.best {
		ms.best = rtt
	}
	ms.rounds++
	if ms.written > 0 {
		since := time.Duration(h1 - min(h1, ms.lastHost))
		congested := rtt > 2*ms.best+syncSlack && since < staleSpacing*spacing
		if since < spacing || congested {
			st.store.Stats.Clock.Skipped.Add(1)
			return false, nil
		}
	}
	p := appendRemoteClockSyncPacket(t.scratch[:0], st.st.machineIdx, r)
	if !ms.marked {
		c2, _ := ClockValue(r.Client2, tracefile.ClockBoottime)
		p = appendMarkerPacket(p, st.st.machineIdx, c2)
	}
	t.scratch = p
	if t.f == nil {
		// No batch created the file yet: the round goes in before the
		// machine's first batch (markMachine), so that a session that
		// never sends a batch leaves no file.
		ms.pending = append(ms.pending[:0], p...)
	} else if err := t.appendPackets(st.store, p); err != nil {
		return false, err
	} else {
		ms.marked = true
	}
	ms.lastHost = h1
	ms.written++
	st.store.Stats.Clock.Rounds.Add(1)
	return true, nil
}

// appendRemoteClockSyncPacket appends one Trace record: a packet with
// trusted_uid, the machine's machine_id and a remote_clock_sync of the
// round's two SyncedClocks (as traced writes it: no sequence id).
func appendRemoteClockSyncPacket(dst []byte, machine uint32, r *ClockRound) []byte {
	p := wire.AppendInt32(nil, tracefile.FieldTrustedUID, int32(os.Getuid()))
	p = wire.AppendVarint(p, tracefile.FieldMachineID, uint64(machine))
	p = tracefile.AppendRemoteClockSync(p, []tracefile.SyncedClocks{
		{Client: r.Client1, Host: r.Host1},
		{Client: r.Client2, Host: r.Host2},
	})
	return tracefile.AppendRecord(dst, p)
}

// writeHostPreamble starts a new merged file with the host's own packets
// (no machine_id): its clock snapshot, naming BOOTTIME the trace clock,
// and its system_info. They make the receiver the host in
// trace_processor's eyes, so that no sender is adopted in its place.
func (t *traceOut) writeHostPreamble(s *Store) error {
	uid := int32(os.Getuid())
	clocks := ReadClocks(nil)
	p := tracefile.AppendServiceHeader(nil, uid)
	p = tracefile.AppendTimestamp(p, clocks[0].Timestamp)
	p = tracefile.AppendClockSnapshot(p, clocks, tracefile.ClockBoottime)
	b := tracefile.AppendRecord(nil, p)
	p = tracefile.AppendSystemInfo(tracefile.AppendServiceHeader(p[:0], uid), tracefile.LocalSystemInfo())
	b = tracefile.AppendRecord(b, p)
	return t.appendPackets(s, b)
}

// appendPackets writes Trace records at the end of the file and records
// the new end in the state file. REQUIRES: t.mu held, the files open.
func (t *traceOut) appendPackets(s *Store, b []byte) error {
	if _, err := t.f.WriteAt(b, t.off); err != nil {
		t.err = fmt.Errorf("remote: %s: write: %w", t.name, err)
		return t.err
	}
	t.off += int64(len(b))
	s.Stats.DiskBytes.Add(int64(len(b)))
	if err := t.saveState(s); err != nil {
		t.err = err
		return err
	}
	return nil
}
