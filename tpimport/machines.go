package tpimport

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/tracefile"
)

// Several machines in one trace (trace-processor-import.md §9).
//
// trace_processor routes every packet with a non-zero machine_id to that
// machine's context. The first such packet decides adoption: when the
// host has had no packet of its own so far (synchronization markers do
// not count), that machine is adopted as the host and shares its clocks.
// Every other machine is forked: its clocks are its own, its BOOTTIME is
// registered (so a failure to convert is "no path", not "unknown
// clock"), and only a remote_clock_sync packet of that machine relates
// them to the host's. Without one, each of its timestamped packets is
// deferred to the end of the file and dropped there
// (clock_sync_failure_no_path + clock_sync_failure_undeferrable_packet_loss).
//
// The Checker models this with machine-scoped clock keys: the host and
// an adopted machine are scope 0, a forked machine is its machine_id, and
// each clock offset a remote_clock_sync yields joins host(clock) and
// machine(clock) in the clock graph.

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
)

// machines is the Checker's machine routing state.
type machines struct {
	hostUsed bool   // a packet without machine_id (not a sync marker) was seen
	resolved bool   // adoption decided (on the first remote packet)
	adopted  uint32 // the adopted machine, 0 for none
	forked   map[uint32]*forkedMachine
}

type forkedMachine struct {
	syncs int // remote_clock_sync packets that yielded at least one offset
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
	mc.forked[m] = &forkedMachine{}
	boot := clockKey{machine: m, id: clockBoottime}
	c.clockParent[boot] = boot // deferred sync: known, but without a path yet
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

// remoteDefaultClock is the clock of a forked machine's packet that names
// none: the trace's default clock (trace_processor copies the host's
// default into the machine's context when it forks it), in the machine's
// own scope. Other packets keep clock.
func (c *Checker) remoteDefaultClock(k seqKey, clock uint32) uint32 {
	if clock == 0 && c.hasTraceClock && c.clockScope(k.machine) != 0 {
		return c.traceClock
	}
	return clock
}

// remoteClockSync handles a remote_clock_sync packet (step 7): the client
// snapshots become snapshots of the machine, and each clock with an offset
// joins the machine's clock to the host's.
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
	if t == (clockKey{id: clockBoottime}) {
		for _, ts := range hostBoot { // the host's own readings: service time
			c.serviceTimestamp(ts)
		}
	}
	for id, d := range offsets {
		hk, mk := clockKey{id: id}, clockKey{machine: scope, id: id}
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

// clockFailureHint explains a conversion failure of a forked machine's
// clock.
func (c *Checker) clockFailureHint(k clockKey) string {
	if k.machine == 0 {
		return ""
	}
	if m := c.mach.forked[k.machine]; m != nil && m.syncs > 0 {
		return fmt.Sprintf(" (machine %d: its remote_clock_sync relates other clocks, not this one)", k.machine)
	}
	return fmt.Sprintf(" (machine %d has no remote_clock_sync relating its clocks to the host's: trace-processor-import.md §9)", k.machine)
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

// CodeRemoteSyncNoRound: a remote_clock_sync from which trace_processor
// computes no offset.
const CodeRemoteSyncNoRound = "remote_clock_sync_without_round"
