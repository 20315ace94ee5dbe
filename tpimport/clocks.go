package tpimport

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/tracefile"
)

// clockUnit is ClockSnapshot.Clock.unit_multiplier_ns.
const clockUnit = 4

// clockDomain is what snapshots said of a clock (every clock a snapshot
// named has one) beyond its offset: its
// unit (ns per tick) and, for a sequence-scoped incremental clock (the
// SDKs' clock 64), the last absolute value, to which each packet's
// timestamp is a delta (trace_processor's ClockTracker).
type clockDomain struct {
	unit        uint64
	incremental bool
	last        uint64 // ns
}

// inDomain turns a packet timestamp in clock id into nanoseconds of that
// clock: times its unit, and for an incremental clock added to the last
// value (which it becomes). The packets trace_processor never converts
// (skipped before tokenization) must not come here: their deltas are lost.
func (c *Checker) inDomain(k seqKey, id uint32, ts uint64) uint64 {
	d := c.clockDomains[c.clockKeyFor(k, id)]
	if d == nil || d.unit == 1 && !d.incremental {
		return ts
	}
	ts *= d.unit
	if d.incremental {
		ts += d.last
		d.last = ts
	}
	return ts
}

// clockKeyFor scopes clock ids 64..127 to their sequence.
func (c *Checker) clockKeyFor(k seqKey, id uint32) clockKey {
	m := c.clockScope(k.machine)
	if id >= 64 && id < 128 {
		return clockKey{machine: m, seq: k.seq, id: id}
	}
	return clockKey{machine: m, id: id}
}

func (c *Checker) root(k clockKey) (clockKey, bool) {
	p, ok := c.clockParent[k]
	if !ok {
		return k, false
	}
	for p != k {
		gp := c.clockParent[p]
		c.clockParent[k] = gp
		k, p = p, gp
	}
	return k, true
}

func (c *Checker) union(a, b clockKey) {
	ra, _ := c.root(a)
	rb, _ := c.root(b)
	if ra != rb {
		c.clockParent[ra] = rb
	}
}

// target is the trace time clock (BOOTTIME until a snapshot says otherwise).
func (c *Checker) target() clockKey {
	if c.hasTraceClock {
		return clockKey{machine: c.mach.traceScope, id: c.traceClock}
	}
	return clockKey{id: clockBoottime}
}

// convertible reports whether a timestamp in clock k can be converted to
// trace time with the snapshots seen so far.
func (c *Checker) convertible(k clockKey) bool {
	t := c.target()
	if k == t {
		return true
	}
	rk, ok1 := c.root(k)
	rt, ok2 := c.root(t)
	return ok1 && ok2 && rk == rt
}

type snapClock struct {
	key         clockKey
	ts          uint64 // ns
	unit        uint64
	incremental bool
}

// clockSnapshot handles a clock_snapshot packet (step 7).
func (c *Checker) clockSnapshot(s *sequence, b []byte, off int64) {
	var clocks []snapClock
	var primary uint32
	var hasPrimary, invalid bool
	seen := map[uint32]bool{}
	_ = walk(b, func(f field) bool {
		switch {
		case f.num == snapPrimary && f.typ == protowire.VarintType:
			primary, hasPrimary = uint32(f.v), true
		case f.num == snapClocks && f.typ == protowire.BytesType:
			var id uint32
			var ts uint64
			var incremental bool
			unit := uint64(1)
			_ = walk(f.payload, func(g field) bool {
				switch g.num {
				case clockID:
					id = uint32(g.v)
				case clockTimestamp:
					ts = g.v
				case clockIncrement:
					incremental = g.v != 0
				case clockUnit:
					if g.v != 0 {
						unit = g.v
					}
				}
				return true
			})
			key := c.clockKeyFor(s.key, id)
			if seen[id] || (incremental && (id < 64 || id >= 128)) {
				invalid = true
			}
			if d := c.clockDomains[key]; d != nil && (d.unit != unit || d.incremental != incremental) {
				invalid = true // a clock re-registered with another unit or incrementality
			}
			seen[id] = true
			clocks = append(clocks, snapClock{key: key, ts: ts * unit, unit: unit, incremental: incremental})
		}
		return true
	})
	if invalid {
		c.stat("invalid_clock_snapshots", -1, SeverityError, 1)
		c.finding("invalid_clock_snapshots", SeverityError, s.key, -1, 1, off, "a clock_snapshot with a clock listed twice or a non-sequence clock marked incremental is ignored")
		return
	}
	c.rep.ClockSnapshots++
	// The trace clock (and the default clock of the snapshot's machine):
	// machines.go, as trace_processor's SetGlobalClock.
	c.snapshotClock(s.key, hasPrimary, primary, seen[clockBoottime] && !seen[clockTraceFile], off)
	for i := range clocks {
		if _, ok := c.clockParent[clocks[i].key]; !ok {
			c.clockParent[clocks[i].key] = clocks[i].key
		}
		// Each snapshot restarts an incremental clock at its value.
		x := clocks[i]
		if d := c.clockDomains[x.key]; d != nil {
			d.last = x.ts
		} else {
			if c.clockDomains == nil {
				c.clockDomains = map[clockKey]*clockDomain{}
			}
			c.clockDomains[x.key] = &clockDomain{unit: x.unit, incremental: x.incremental, last: x.ts}
		}
		if i > 0 {
			c.union(clocks[0].key, clocks[i].key)
		}
	}
	t := c.target()
	for _, tc := range clocks {
		if tc.key != t {
			continue
		}
		c.serviceTimestamp(tc.ts)
		for _, x := range clocks {
			if _, ok := c.clockOffset[x.key]; !ok {
				c.clockOffset[x.key] = int64(tc.ts) - int64(x.ts)
			}
		}
	}
}

func (c *Checker) serviceTimestamp(ts uint64) {
	if !c.svc.has || ts < c.svc.lo {
		c.svc.lo = ts
	}
	if !c.svc.has || ts > c.svc.hi {
		c.svc.hi = ts
	}
	c.svc.has = true
}

// serviceTime widens the service's clock range with a service packet's
// timestamp (service events and trace stats are stamped on BOOTTIME).
func (c *Checker) serviceTime(info *tracefile.PacketInfo) {
	if !info.HasTimestamp {
		return
	}
	id := info.TimestampClockID
	if id == 0 {
		id = clockBoottime
	}
	if ts, ok := c.toTrace(c.clockKeyFor(seqKey{machine: info.MachineID}, id), info.Timestamp); ok {
		c.serviceTimestamp(ts)
	}
}

// toTrace converts ts in clock k to trace time when a snapshot relates
// them directly (or k is the trace clock).
func (c *Checker) toTrace(k clockKey, ts uint64) (uint64, bool) {
	if k == c.target() {
		return ts, true
	}
	if d, ok := c.clockOffset[k]; ok {
		return uint64(int64(ts) + d), true
	}
	return 0, false
}

// producerTime records a producer packet's timestamp for the session range
// check.
func (c *Checker) producerTime(s *sequence, k seqKey, clock uint32, ts uint64, off int64) {
	if clock != 0 {
		var ok bool
		if ts, ok = c.toTrace(c.clockKeyFor(k, clock), ts); !ok {
			return
		}
	}
	if !s.ts.has || ts < s.ts.lo {
		s.ts.lo = ts
	}
	if !s.ts.has || ts > s.ts.hi {
		s.ts.hi = ts
	}
	if !s.ts.has {
		s.ts.firstOff = off
	}
	s.ts.has = true
	if c.svc.has && c.rep.ClockSnapshots > 0 && c.opts.ClockSlackNs > 0 && ts+uint64(c.opts.ClockSlackNs) < c.svc.lo {
		s.ts.outside++
	}
}

// finishClocks drops the packets whose clocks never became convertible
// (trace_processor defers them to the end of the file, retries, then drops
// them).
func (c *Checker) finishClocks() {
	t := c.target()
	_, targetKnown := c.root(t)
	for pk, p := range c.pendingClocks {
		k := pk.clock
		if c.convertible(k) {
			continue
		}
		name := "clock_sync_failure_no_path"
		_, known := c.root(k)
		switch {
		case !known && k.id == clockBoottime && !c.hasTraceClock && c.rep.ClockSnapshots == 0:
			continue // BOOTTIME is the identity clock without any snapshot
		case !known:
			name = "clock_sync_failure_unknown_source_clock"
		case !targetKnown:
			name = "clock_sync_failure_unknown_target_clock"
		}
		c.stat(name, -1, SeverityError, p.count)
		c.stat("clock_sync_failure_undeferrable_packet_loss", -1, SeverityDataLoss, p.count)
		c.finding(name, SeverityError, p.seq, -1, p.count, p.off,
			fmt.Sprintf("timestamps in clock %d cannot be converted to trace time (clock %d): the packets are dropped%s", k.id, t.id, c.clockFailureHint(k)))
		if s := c.seqs[p.seq]; s != nil {
			s.rep.Dropped += p.count
			s.rep.Imported -= p.count
		}
	}
	if c.rep.ClockSnapshots == 0 && c.rep.Packets > 0 {
		c.finding(CodeNoClockSnapshot, SeverityCheck, seqKey{}, -1, 1, -1,
			"no clock_snapshot: trace_processor has no trace time clock (metadata trace_time_clock_id absent) and cannot relate BOOTTIME to the other clocks")
	}
}
