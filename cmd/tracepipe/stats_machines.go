package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/tracepipe/tracepipe/tracefile"
)

// What `stats` knows per machine of a trace: a merged trace written by
// `serve --merge` holds several (packets carry machine_id 1, 2, ...), a
// per-session received trace one, a local trace one (machine_id absent,
// 0). Each machine has its own last TraceStats (its sender's counters),
// and the receiver's account of each of its sessions (TraceStats packets
// with a receiver section, which serve writes after each TraceStats of a
// sender and at each gap).

// machineStats is one machine's part of a scan.
type machineStats struct {
	id      uint32 // machine_id field (0: none)
	packets int
	last    *statsAt // last TraceStats carrying the sender's counters
	// receivers is the latest receiver section per session, in the
	// order the sessions first appeared.
	receivers map[[16]byte]*tracefile.ReceiverStats
	sessions  [][16]byte
}

func (s *statsScan) machine(id uint32) *machineStats {
	if s.machines == nil {
		s.machines = map[uint32]*machineStats{}
	}
	m := s.machines[id]
	if m == nil {
		m = &machineStats{id: id, receivers: map[[16]byte]*tracefile.ReceiverStats{}}
		s.machines[id] = m
	}
	return m
}

// noteTraceStats records a decoded TraceStats packet of machine id and
// reports whether it carries sender counters (a receiver-only packet
// does not).
func (s *statsScan) noteTraceStats(id uint32, at statsAt) bool {
	m := s.machine(id)
	sender := true
	if tp := at.ts.Tracepipe; tp != nil && tp.Receiver != nil {
		r := tp.Receiver
		if _, ok := m.receivers[r.Session]; !ok {
			m.sessions = append(m.sessions, r.Session)
		}
		m.receivers[r.Session] = r
		sender = r.SenderStats
	}
	if sender || m.last == nil {
		at := at
		m.last = &at
	}
	return sender
}

// machineIDs lists the machines seen, in machine_id order.
func (s *statsScan) machineIDs() []uint32 {
	ids := make([]uint32, 0, len(s.machines))
	for id, m := range s.machines {
		if m.last != nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// multiMachine reports whether the trace is a merged one: TraceStats of
// machines other than the host's.
func (s *statsScan) multiMachine() bool {
	ids := s.machineIDs()
	return len(ids) > 1 || len(ids) == 1 && ids[0] != 0
}

// name says which machine m is: its machine_id, and from the receiver's
// sections its hostname and 64-bit machine id.
func (m *machineStats) name() string {
	var b strings.Builder
	if m.id != 0 {
		fmt.Fprintf(&b, "machine_id %d: ", m.id)
	}
	if len(m.sessions) > 0 {
		r := m.receivers[m.sessions[0]]
		fmt.Fprintf(&b, "%s (machine %016x)", r.Hostname, r.Machine)
	} else if m.id == 0 {
		b.WriteString("the recording machine (no machine_id)")
	} else {
		b.WriteString("no receiver section")
	}
	return b.String()
}

// rows is m's loss report: its last sender TraceStats, then the latest
// receiver section of each of its sessions.
func (m *machineStats) rows() []tracefile.LossRow {
	if m.last == nil {
		return nil
	}
	ts := m.last.ts
	if ts.Tracepipe != nil && ts.Tracepipe.Receiver != nil {
		tp := *ts.Tracepipe
		tp.Receiver = nil
		ts.Tracepipe = &tp
	}
	rows := tracefile.LossReport(ts)
	for _, sess := range m.sessions {
		r := m.receivers[sess]
		for _, row := range tracefile.ReceiverLossRows(r) {
			if len(m.sessions) > 1 {
				row.Name = strings.Replace(row.Name, "serve.", "serve["+r.SessionString()[:8]+"].", 1)
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// gaps names the batches the receiver found missing, per session.
func (m *machineStats) gaps() []string {
	var out []string
	for _, sess := range m.sessions {
		r := m.receivers[sess]
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

// lossRows is the loss report `stats` judges a single-machine trace by.
func (s *statsScan) lossRows() []tracefile.LossRow {
	if ids := s.machineIDs(); len(ids) == 1 {
		return s.machines[ids[0]].rows()
	}
	return tracefile.LossReport(s.last().ts)
}

// machineLoss lists, per machine with loss, what was lost: for
// --fail-on-loss on a merged trace.
func (s *statsScan) machineLoss() []string {
	var parts []string
	for _, id := range s.machineIDs() {
		m := s.machines[id]
		var lost []string
		for _, r := range m.rows() {
			if s.lossCtx.Lost(r) {
				lost = append(lost, fmt.Sprintf("%s=%d", r.Name, r.Value))
			}
		}
		if len(lost) == 0 {
			continue
		}
		msg := m.name() + ": " + strings.Join(lost, ", ")
		if g := m.gaps(); len(g) > 0 {
			msg += " [" + strings.Join(g, "; ") + "]"
		}
		parts = append(parts, msg)
	}
	return parts
}

// writeReceived prints, for a received trace, what serve stored of each
// session next to what the file holds, and says whose counters are whose.
func writeReceived(w io.Writer, s *statsScan) {
	any := false
	for _, id := range s.machineIDs() {
		m := s.machines[id]
		for _, sess := range m.sessions {
			if !any {
				fmt.Fprintln(w, "\nreceived by tracepipe serve (serve.* counters are the receiver's; sink_* counters are the sender's sink, a relay sink's sink_packets_written being what was acknowledged when it wrote its TraceStats):")
				any = true
			}
			r := m.receivers[sess]
			fmt.Fprintf(w, "  %s session %s: serve stored %d packets in %d batches (this machine's packets in the file: %d)", m.name(), r.SessionString(), r.PacketsStored, r.BatchesStored, m.packets)
			if g := r.GapText(); g != "" {
				fmt.Fprintf(w, "; MISSING %s", g)
			}
			if r.BatchesRefused > 0 {
				fmt.Fprintf(w, "; %d batch(es) REFUSED", r.BatchesRefused)
			}
			fmt.Fprintln(w)
		}
	}
}

// writeMachines prints a merged trace: each machine's loss table, then
// the set's verdict.
func writeMachines(w io.Writer, s *statsScan) error {
	ids := s.machineIDs()
	var lossy []string
	for _, id := range ids {
		m := s.machines[id]
		fmt.Fprintf(w, "\n%s: %d packet(s), last TraceStats at offset %d\n", m.name(), m.packets, m.last.offset)
		rows := m.rows()
		if err := tracefile.WriteLossTable(w, rows); err != nil {
			return err
		}
		if tracefile.HasDataLoss(rows) {
			lossy = append(lossy, m.name())
		}
	}
	if len(lossy) == 0 {
		_, err := fmt.Fprintf(w, "\nset of %d machine(s): no data loss recorded\n", len(ids))
		return err
	}
	_, err := fmt.Fprintf(w, "\nset of %d machine(s): DATA LOSS on %s\n", len(ids), strings.Join(lossy, "; "))
	return err
}

// machineLabel names the machine of a TraceStats packet for --all.
func (s *statsScan) machineLabel(id uint32) string {
	if m := s.machines[id]; m != nil && s.multiMachine() {
		return " of " + m.name()
	}
	return ""
}
