package tracefile

import (
	"fmt"
	"slices"
	"strings"
)

// What the stats scan knows per machine of a trace: a merged trace written
// by `serve --merge` holds several (packets carry machine_id 1, 2, ...), a
// per-session received trace one, a local trace one (machine_id absent,
// 0). Each machine has its own last TraceStats (its sender's counters),
// and the receiver's account of each of its sessions (TraceStats packets
// with a receiver section, which serve writes after each TraceStats of a
// sender and at each gap).

// MachineStats is one machine's part of a StatsScan.
type MachineStats struct {
	ID      uint32 // machine_id field (0: none)
	Packets int
	Last    *StatsAt // last TraceStats carrying the sender's counters
	// Receivers is the latest receiver section per session, Sessions the
	// sessions in the order they first appeared.
	Receivers map[[16]byte]*ReceiverStats
	Sessions  [][16]byte
}

func (s *StatsScan) machine(id uint32) *MachineStats {
	if s.Machines == nil {
		s.Machines = map[uint32]*MachineStats{}
	}
	m := s.Machines[id]
	if m == nil {
		m = &MachineStats{ID: id, Receivers: map[[16]byte]*ReceiverStats{}}
		s.Machines[id] = m
	}
	return m
}

// noteTraceStats records a decoded TraceStats packet of machine id and
// reports whether it carries sender counters (a receiver-only packet
// does not).
func (s *StatsScan) noteTraceStats(id uint32, at StatsAt) bool {
	m := s.machine(id)
	sender := true
	if tp := at.Stats.Tracepipe; tp != nil && tp.Receiver != nil {
		r := tp.Receiver
		if _, ok := m.Receivers[r.Session]; !ok {
			m.Sessions = append(m.Sessions, r.Session)
		}
		m.Receivers[r.Session] = r
		sender = r.SenderStats
	}
	if sender || m.Last == nil {
		at := at
		m.Last = &at
	}
	return sender
}

// MachineIDs lists the machines with a TraceStats, in machine_id order.
func (s *StatsScan) MachineIDs() []uint32 {
	ids := make([]uint32, 0, len(s.Machines))
	for id, m := range s.Machines {
		if m.Last != nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// MultiMachine reports whether the trace is a merged one: TraceStats of
// machines other than the host's.
func (s *StatsScan) MultiMachine() bool {
	ids := s.MachineIDs()
	return len(ids) > 1 || len(ids) == 1 && ids[0] != 0
}

// Name says which machine m is: its machine_id, and from the receiver's
// sections its hostname and 64-bit machine id.
func (m *MachineStats) Name() string {
	var b strings.Builder
	if m.ID != 0 {
		fmt.Fprintf(&b, "machine_id %d: ", m.ID)
	}
	if len(m.Sessions) > 0 {
		r := m.Receivers[m.Sessions[0]]
		fmt.Fprintf(&b, "%s (machine %016x)", r.Hostname, r.Machine)
	} else if m.ID == 0 {
		b.WriteString("the recording machine (no machine_id)")
	} else {
		b.WriteString("no receiver section")
	}
	return b.String()
}

// Rows is m's loss report: its last sender TraceStats, then the latest
// receiver section of each of its sessions.
func (m *MachineStats) Rows() []LossRow {
	if m.Last == nil {
		return nil
	}
	ts := m.Last.Stats
	if ts.Tracepipe != nil && ts.Tracepipe.Receiver != nil {
		tp := *ts.Tracepipe
		tp.Receiver = nil
		ts.Tracepipe = &tp
	}
	rows := LossReport(ts)
	for _, sess := range m.Sessions {
		r := m.Receivers[sess]
		for _, row := range ReceiverLossRows(r) {
			if len(m.Sessions) > 1 {
				row.Name = strings.Replace(row.Name, "serve.", "serve["+r.SessionString()[:8]+"].", 1)
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// Gaps names the batches the receiver found missing, per session.
func (m *MachineStats) Gaps() []string {
	var out []string
	for _, sess := range m.Sessions {
		r := m.Receivers[sess]
		if r.BatchesMissing > 0 || r.BatchesRefused > 0 {
			var what []string
			if r.BatchesMissing > 0 {
				what = append(what, fmt.Sprintf("%d batch(es) missing (%s)", r.BatchesMissing, r.GapText()))
			}
			if r.BatchesRefused > 0 {
				what = append(what, fmt.Sprintf("%d batch(es) refused", r.BatchesRefused))
			}
			out = append(out, fmt.Sprintf("session %s of %s: %s", r.SessionString(), r.Hostname, strings.Join(what, ", ")))
		}
	}
	return out
}

// LossRows is the loss report a single-machine trace is judged by.
// REQUIRES: Last() != nil.
func (s *StatsScan) LossRows() []LossRow {
	if ids := s.MachineIDs(); len(ids) == 1 {
		return s.Machines[ids[0]].Rows()
	}
	return LossReport(s.Last().Stats)
}

// machineLoss lists, per machine with loss, what was lost: LossSummary of
// a merged trace.
func (s *StatsScan) machineLoss() []string {
	var parts []string
	for _, id := range s.MachineIDs() {
		m := s.Machines[id]
		var lost []string
		for _, r := range m.Rows() {
			if s.LossContext.Lost(r) {
				lost = append(lost, fmt.Sprintf("%s=%d", r.Name, r.Value))
			}
		}
		if len(lost) == 0 {
			continue
		}
		msg := m.Name() + ": " + strings.Join(lost, ", ")
		if g := m.Gaps(); len(g) > 0 {
			msg += " [" + strings.Join(g, "; ") + "]"
		}
		parts = append(parts, msg)
	}
	return parts
}
