package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/tracepipe/tracepipe/tracefile"
)

// The per-machine part of `stats`' output (tracefile.MachineStats): a
// merged trace's tables, the receiver's account of each session.

// writeReceived prints, for a received trace, what serve stored of each
// session next to what the file holds, and says whose counters are whose.
func writeReceived(w io.Writer, s *tracefile.StatsScan) {
	any := false
	for _, id := range s.MachineIDs() {
		m := s.Machines[id]
		for _, sess := range m.Sessions {
			if !any {
				fmt.Fprintln(w, "\nreceived by tracepipe serve (serve.* counters are the receiver's; sink_* counters are the sender's sink, a relay sink's sink_packets_written being what was acknowledged when it wrote its TraceStats):")
				any = true
			}
			r := m.Receivers[sess]
			fmt.Fprintf(w, "  %s session %s: serve stored %d packets in %d batches (this machine's packets in the file: %d)", m.Name(), r.SessionString(), r.PacketsStored, r.BatchesStored, m.Packets)
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
func writeMachines(w io.Writer, s *tracefile.StatsScan) error {
	ids := s.MachineIDs()
	var lossy []string
	for _, id := range ids {
		m := s.Machines[id]
		fmt.Fprintf(w, "\n%s: %d packet(s), last TraceStats at offset %d\n", m.Name(), m.Packets, m.Last.Offset)
		rows := m.Rows()
		if err := tracefile.WriteLossTable(w, rows); err != nil {
			return err
		}
		if tracefile.HasDataLoss(rows) {
			lossy = append(lossy, m.Name())
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
func machineLabel(s *tracefile.StatsScan, id uint32) string {
	if m := s.Machines[id]; m != nil && s.MultiMachine() {
		return " of " + m.Name()
	}
	return ""
}
