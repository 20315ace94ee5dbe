package tpimport

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/tracefile"
)

// Several machines in one trace (trace-processor-import.md §9), as
// trace_processor ec5d16b imports them (proto_trace_reader.cc,
// clock_tracker.cc).
//
//  1. Routing: every packet with a non-zero machine_id goes to that
//     machine's context. The first such packet decides adoption: when the
//     host has had no packet of its own so far (synchronization markers do
//     not count), that machine is adopted as the host and shares its
//     clocks. Every other machine is forked: its clocks are its own, and
//     its BOOTTIME gets a deferred sync to the trace clock.
//  2. The trace clock is one clock of one machine. A clock_snapshot naming
//     a primary_trace_clock, or holding BOOTTIME (and not TRACE_FILE),
//     sets it to that clock *of the snapshot's machine*, unless that
//     machine's clock tracker has already converted a timestamp. So a
//     remote machine whose own snapshot comes before any timestamp of it
//     takes the trace clock away from the host; packets of the host and
//     of other machines converted later need a path to that machine's
//     BOOTTIME, and without one they are dropped at the end of the file
//     (clock_sync_failure_no_path + clock_sync_failure_undeferrable_packet_loss).
//  3. A forked machine's first conversion flushes its deferred sync: if
//     its BOOTTIME has no path to the trace clock, trace_processor bridges
//     it by assumption, through REALTIME (when the machine's BOOTTIME
//     reaches its REALTIME and the trace clock's machine has REALTIME too)
//     or, when the trace clock is a BOOTTIME, by equating the two
//     BOOTTIMEs. The events import, placed as if the clocks agreed.
//  4. remote_clock_sync (parsed in the machine's context) adds its client
//     snapshots as snapshots of the machine and, for every clock with an
//     offset (RemoteClockOffsets), an edge between that clock on the trace
//     clock's machine and on this one.
//
// The Checker models this with machine-scoped clock keys (scope 0: the
// host and an adopted machine; a forked machine: its machine_id), a
// conversion count per scope, and the trace clock's scope.

// RemoteClockSync field numbers (trace-processor-import.md §9).
const (
	rcsSyncedClocks = 1
	scClientClocks  = 2
	scHostClocks    = 3

	// syncRoundNs: adjacent SyncedClocks whose client BOOTTIME values are
	// at least this far apart belong to different rounds.
	syncRoundNs = 30_000_000_000

	// maxMachines bounds the forked machines a Checker tracks.
	maxMachines = 1 << 16

	clockRealtime = 1
)

// Finding codes of the multi-machine rules.
const (
	// CodeRemoteSyncNoRound: a remote_clock_sync from which
	// trace_processor computes no offset.
	CodeRemoteSyncNoRound = "remote_clock_sync_without_round"
	// CodeClockAssumedAligned: a remote machine's clocks reach the trace
	// clock only by trace_processor's assumption that they agree.
	CodeClockAssumedAligned = "remote_clock_assumed_aligned"
	// CodeTraceClockMoved: a remote machine's own clock snapshot made its
	// clock the trace clock.
	CodeTraceClockMoved = "trace_clock_moved_to_remote_machine"
)

// machines is the Checker's machine routing and clock-tracker state.
type machines struct {
	hostUsed   bool   // a packet without machine_id (not a sync marker) was seen
	resolved   bool   // adoption decided (on the first remote packet)
	adopted    uint32 // the adopted machine, 0 for none
	forked     map[uint32]*forkedMachine
	traceScope uint32 // the machine (scope) of the trace clock
	hostConv   int64  // timestamps the host's tracker converted
	hostDef    uint32 // the host's default clock (0: none)
	movedBy    uint32 // the last remote machine that took the trace clock
}

type forkedMachine struct {
	conversions int64
	defClock    uint32 // default clock (inherited from the host when forked)
	syncs       int    // remote_clock_sync packets that yielded an offset
}

// route applies step 1 of §0 to a packet of machine m: it records host
// data, decides adoption, and forks machines on first sight.
func (c *Checker) route(m uint32, payload int32) {
	mc := &c.mach
	if m == 0 {
		if payload != tracefile.FieldSynchronizationMarker {
			mc.hostUsed = true
		}
		return
	}
	if !mc.resolved {
		mc.resolved = true
		if !mc.hostUsed {
			mc.adopted = m
		}
	}
	if m == mc.adopted {
		return
	}
	if _, ok := mc.forked[m]; ok {
		return
	}
	if mc.forked == nil {
		mc.forked = map[uint32]*forkedMachine{}
	}
	if len(mc.forked) >= maxMachines {
		c.finding(CodeNotModelled, SeverityCheck, seqKey{}, -1, 1, -1,
			fmt.Sprintf("more than %d machines: the clocks of the others are not predicted", maxMachines))
		return
	}
	mc.forked[m] = &forkedMachine{defClock: mc.hostDef}
	boot := clockKey{machine: m, id: clockBoottime}
	c.clockParent[boot] = boot // the deferred sync's node
}

// clockScope is the clock scope of machine m's packets: 0 for the host and
// an adopted machine, m for a forked one.
func (c *Checker) clockScope(m uint32) uint32 {
	if m == 0 || m == c.mach.adopted {
		return 0
	}
	if _, ok := c.mach.forked[m]; !ok {
		return 0 // beyond maxMachines: not modelled
	}
	return m
}

// snapshotClock applies a clock_snapshot of the machine of k to the
// default and trace clocks (rule 2): clock is its primary_trace_clock,
// else BOOTTIME when boot (BOOTTIME present, TRACE_FILE absent).
func (c *Checker) snapshotClock(k seqKey, hasPrimary bool, primary uint32, boot bool, off int64) {
	id := primary
	switch {
	case hasPrimary:
	case boot:
		id = clockBoottime
	default:
		return
	}
	scope := c.clockScope(k.machine)
	conv := c.mach.hostConv
	if fm := c.mach.forked[scope]; scope != 0 && fm != nil {
		fm.defClock = id
		conv = fm.conversions
	} else {
		c.mach.hostDef = id
	}
	if conv > 0 {
		return // SetGlobalClock refuses once the tracker converted
	}
	if scope != 0 && (!c.hasTraceClock || c.mach.traceScope != scope) {
		c.mach.movedBy = scope
		c.finding(CodeTraceClockMoved, SeverityCheck, seqKey{machine: k.machine}, -1, 1, off,
			fmt.Sprintf("a clock_snapshot of machine %d, before any timestamp of that machine was converted, makes its clock %d the trace clock: "+
				"packets of the host and other machines converted afterwards need a path to it (precede it with a timestamped packet of the machine, after its remote_clock_sync)", k.machine, id))
	}
	c.traceClock, c.hasTraceClock, c.mach.traceScope = id, true, scope
}

// converting records that the tracker of machine m converts a timestamp
// now; a forked machine's first conversion flushes its deferred sync
// (rule 3) first.
func (c *Checker) converting(m uint32, off int64) {
	scope := c.clockScope(m)
	fm := c.mach.forked[scope]
	if scope == 0 || fm == nil {
		c.mach.hostConv++
		return
	}
	fm.conversions++
	if fm.conversions > 1 {
		return
	}
	boot := clockKey{machine: scope, id: clockBoottime}
	g := c.target()
	if c.connected(boot, g) {
		return
	}
	rt, grt := clockKey{machine: scope, id: clockRealtime}, clockKey{machine: g.machine, id: clockRealtime}
	how := ""
	switch {
	case rt != grt && c.connected(boot, rt) && c.connected(grt, g):
		c.union(rt, grt)
		how = "REALTIME equals the trace clock machine's REALTIME"
	case g.id == clockBoottime:
		c.union(boot, g)
		how = "BOOTTIME equals the trace clock (BOOTTIME)"
	default:
		return // declined: its conversions fail (no_path)
	}
	c.finding(CodeClockAssumedAligned, SeverityCheck, seqKey{machine: m}, -1, 1, off,
		fmt.Sprintf("machine %d: no remote_clock_sync relates its clocks to the trace clock before its first timestamp, so trace_processor assumes its %s: an offset between the machines shifts all its events", m, how))
}

// connected reports whether clocks a and b are related by snapshots.
func (c *Checker) connected(a, b clockKey) bool {
	if a == b {
		return true
	}
	ra, ok1 := c.root(a)
	rb, ok2 := c.root(b)
	return ok1 && ok2 && ra == rb
}

// packetClock is the clock a timestamped packet of k is converted from:
// its own or its sequence defaults' (clock, when not 0), else its
// machine's default clock; and it records the conversion.
func (c *Checker) packetClock(k seqKey, clock uint32, hasTimestamp bool, off int64) uint32 {
	if clock == 0 {
		scope := c.clockScope(k.machine)
		if fm := c.mach.forked[scope]; scope != 0 && fm != nil {
			clock = fm.defClock
		} else {
			clock = c.mach.hostDef
		}
	}
	if hasTimestamp && clock != 0 {
		c.converting(k.machine, off)
	}
	return clock
}

// remoteClockSync handles a remote_clock_sync packet (step 7, rule 4).
func (c *Checker) remoteClockSync(k seqKey, b []byte, off int64) {
	scope := c.clockScope(k.machine)
	if scope == 0 {
		// On the host (or an adopted machine) it relates the host to
		// itself: nothing to predict.
		return
	}
	offsets, clients, hostBoot, err := remoteClockOffsets(b)
	if err != nil {
		c.finding(CodeMalformedPacket, SeverityCheck, k, -1, 1, off, "remote_clock_sync: "+err.Error())
		return
	}
	for _, snap := range clients {
		var first clockKey
		for i, id := range snap {
			mk := clockKey{machine: scope, id: id}
			if _, ok := c.clockParent[mk]; !ok {
				c.clockParent[mk] = mk
			}
			if i == 0 {
				first = mk
			} else {
				c.union(first, mk)
			}
		}
	}
	if len(offsets) == 0 {
		c.finding(CodeRemoteSyncNoRound, SeverityCheck, k, -1, 1, off,
			"a remote_clock_sync without a full round (two SyncedClocks less than 30 s apart with BOOTTIME on both sides) yields no clock offset")
		return
	}
	c.mach.forked[scope].syncs++
	t := c.target()
	host := c.mach.traceScope // trace_processor's "host" is the trace clock's machine
	if t == (clockKey{machine: host, id: clockBoottime}) && host == 0 {
		for _, ts := range hostBoot { // the host's own readings: service time
			c.serviceTimestamp(ts)
		}
	}
	for id, d := range offsets {
		hk, mk := clockKey{machine: host, id: id}, clockKey{machine: scope, id: id}
		if _, ok := c.clockParent[hk]; !ok {
			c.clockParent[hk] = hk
		}
		c.union(hk, mk)
		// machine(id) − d = host(id); host(id) + h = trace time.
		h, ok := c.clockOffset[hk]
		if hk == t {
			h, ok = 0, true
		}
		if _, set := c.clockOffset[mk]; ok && !set {
			c.clockOffset[mk] = h - d
		}
	}
}

// clockFailureHint explains a conversion failure on a multi-machine trace.
func (c *Checker) clockFailureHint(k clockKey) string {
	switch {
	case c.mach.movedBy != 0:
		return fmt.Sprintf(" (the trace clock is machine %d's since its clock_snapshot: %s)", c.mach.traceScope, CodeTraceClockMoved)
	case k.machine != 0:
		return fmt.Sprintf(" (machine %d: no remote_clock_sync relates this clock to the trace clock)", k.machine)
	}
	return ""
}

// RemoteClockOffsets returns, for a remote_clock_sync payload (the
// RemoteClockSync message), each builtin clock's offset client − host in
// ns as trace_processor estimates it (CalculateClockOffsets): for each
// pair of adjacent SyncedClocks whose client BOOTTIME values are less than
// 30 s apart, readings t1c, t1h, t2c, t2h of a clock present (non-zero)
// on both sides in both give (t1c+t2c)/2 − t1h and t2c − (t1h+t2h)/2; the
// offset is the mean of all of them, in integer arithmetic. A client
// timestamp T on the remote machine is host time T − offset.
func RemoteClockOffsets(payload []byte) (map[uint32]int64, error) {
	offsets, _, _, err := remoteClockOffsets(payload)
	return offsets, err
}

// syncedClock is one clock's (host, client) readings in one SyncedClocks.
type syncedClock struct{ host, client uint64 }

// remoteClockOffsets also returns the clock ids of each client snapshot
// and the host's BOOTTIME readings.
func remoteClockOffsets(payload []byte) (offsets map[uint32]int64, clients [][]uint32, hostBoot []uint64, err error) {
	var entries []map[uint32]syncedClock
	err = walk(payload, func(f field) bool {
		if f.num != rcsSyncedClocks || f.typ != protowire.BytesType {
			return true
		}
		e := map[uint32]syncedClock{}
		var client []uint32
		_ = walk(f.payload, func(g field) bool {
			if g.typ != protowire.BytesType || g.num != scClientClocks && g.num != scHostClocks {
				return true
			}
			_ = walk(g.payload, func(h field) bool {
				if h.num != snapClocks || h.typ != protowire.BytesType {
					return true
				}
				var id uint32
				var ts uint64
				_ = walk(h.payload, func(x field) bool {
					switch x.num {
					case clockID:
						id = uint32(x.v)
					case clockTimestamp:
						ts = x.v
					}
					return true
				})
				sc := e[id]
				if g.num == scHostClocks {
					sc.host = ts
					if id == clockBoottime {
						hostBoot = append(hostBoot, ts)
					}
				} else {
					sc.client = ts
					client = append(client, id)
				}
				e[id] = sc
				return true
			})
			return true
		})
		entries = append(entries, e)
		clients = append(clients, client)
		return true
	})
	if err != nil {
		return nil, nil, nil, err
	}
	raw := map[uint32][]int64{}
	for i := 1; i < len(entries); i++ {
		ping, update := entries[i-1], entries[i]
		if update[clockBoottime].client-ping[clockBoottime].client >= syncRoundNs {
			continue // different rounds (unsigned, as trace_processor: backwards too)
		}
		for id, a := range ping {
			b := update[id]
			if a.host == 0 || a.client == 0 || b.host == 0 || b.client == 0 {
				continue
			}
			o1 := int64(a.client+b.client)/2 - int64(a.host)
			o2 := int64(b.client) - int64(a.host+b.host)/2
			raw[id] = append(raw[id], o1, o2)
		}
	}
	offsets = map[uint32]int64{}
	for id, v := range raw {
		var sum int64
		for _, x := range v {
			sum += x
		}
		offsets[id] = sum / int64(len(v))
	}
	return offsets, clients, hostBoot, nil
}
