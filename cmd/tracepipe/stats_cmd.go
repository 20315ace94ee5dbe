package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tracepipe/tracepipe/tracefile"
)

const statsLong = `Read a trace file (plain, gzip or zstd) and print the data-loss table of its
last TraceStats packet: every counter, service-level and per buffer, with its
severity (data_loss or info) and value. Counters marked "!" lost data.

The service writes TraceStats when the session stops (and periodically in
streaming mode); the counters are cumulative, so the last packet is the whole
story. Packets the service flagged with previous_packet_dropped are counted
per sequence and per loss reason.

A truncated trace (e.g. the recorder was killed) is reported on stderr and
the stats of the last complete TraceStats packet are still printed.

Several files (a rotated set, e.g. out/t.pftrace*) are read in rotation
order: one line per file with its packets and its own last TraceStats'
sink counters, then the set as one trace (the last file's last TraceStats,
every flagged packet of every file).

A trace received by 'tracepipe serve' also holds the receiver's account
of each session (serve.* counters: batches stored, missing, refused); a
missing or refused batch is data loss, named with its batch numbers. A
merged trace (serve --merge) is reported per machine (machine_id, hostname,
machine id), each with its own last TraceStats, then as a set. See
docs/serve.md.

Exit codes: 0 ok, 1 error (unreadable file, no TraceStats packet),
2 usage error, 3 data loss found with --fail-on-loss.`

// newStatsCmd builds `tracepipe stats`.
func newStatsCmd() *cobra.Command {
	var opts statsOptions
	c := &cobra.Command{
		Use:   "stats TRACE...",
		Short: "Print the data-loss table of a trace's last TraceStats packet",
		Long:  statsLong,
		Example: `  tracepipe stats trace.pftrace
  tracepipe stats --fail-on-loss trace.pftrace.zst
  tracepipe stats --json --all trace.pftrace
  tracepipe stats out/long.pftrace.zst*     # a rotated set: each file, then the set`,
		Args: traceArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.maxPacketBuffer < 1 {
				return usageError{fmt.Errorf("--max-packet-buffer must be >= 1, got %d", opts.maxPacketBuffer)}
			}
			if len(args) > 1 {
				return runStatsSet(args, opts, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			return runStats(args[0], opts, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	c.Flags().BoolVar(&opts.failOnLoss, "fail-on-loss", false, "exit with code 3 when a data_loss counter is non-zero or a packet has previous_packet_dropped set")
	c.Flags().BoolVar(&opts.all, "all", false, "print the table of every TraceStats packet in the file, not only the last")
	c.Flags().BoolVar(&opts.json, "json", false, "print JSON lines, one object per row (kinds: trace, counter, previous_packet_dropped)")
	c.Flags().IntVar(&opts.maxPacketBuffer, "max-packet-buffer", tracefile.DefaultMaxPacketBuffer,
		"bytes held of one packet; fields of a longer packet that do not fit are skipped unread and reported (a TraceStats packet among them is not decoded)")
	return c
}

type statsOptions struct {
	failOnLoss      bool
	all             bool
	json            bool
	maxPacketBuffer int // 0: tracefile.DefaultMaxPacketBuffer
}

// scanOptions is what the scan of one file needs of opts.
func (o statsOptions) scanOptions() tracefile.StatsScanOptions {
	return tracefile.StatsScanOptions{KeepAll: o.all, MaxPacketBuffer: o.maxPacketBuffer}
}

func runStats(path string, opts statsOptions, stdout, stderr io.Writer) error {
	s, readErr := tracefile.ScanStats(path, opts.scanOptions())
	if s == nil {
		return readErr
	}
	last := s.Last()
	if s.Truncated != nil && last != nil {
		fmt.Fprintf(stderr, "tracepipe: warning: %s is truncated (%v); the stats below come from the last complete TraceStats packet, the session's final one may be missing\n", path, s.Truncated)
	}
	if s.BadPackets > 0 {
		fmt.Fprintf(stderr, "tracepipe: warning: %s: %d packet(s) could not be decoded\n", path, s.BadPackets)
	}
	if s.ElidedPackets > 0 {
		fmt.Fprintf(stderr, "tracepipe: warning: %s: %d packet(s) longer than the packet buffer: %d bytes of their fields skipped unread (raise with --max-packet-buffer)\n", path, s.ElidedPackets, s.ElidedBytes)
	}
	if s.BadStats > 0 {
		fmt.Fprintf(stderr, "tracepipe: warning: %s: %d TraceStats packet(s) could not be decoded; first: %v\n", path, s.BadStats, s.BadStatsErr)
	}
	if last == nil {
		if readErr != nil {
			return readErr
		}
		if s.Truncated != nil {
			return fmt.Errorf("%s is truncated (%v): no TraceStats packet in %d packet(s) read before the cut (the service writes one when the session stops)", path, s.Truncated, s.Packets)
		}
		if s.StatsPackets > 0 {
			return fmt.Errorf("%s: none of its %d TraceStats packet(s) could be decoded: %w", path, s.StatsPackets, s.BadStatsErr)
		}
		return fmt.Errorf("%s: no TraceStats packet in %d packet(s) read: the service writes one when the session stops; was the trace cut before the session ended?", path, s.Packets)
	}

	var err error
	if opts.json {
		err = writeStatsJSON(stdout, path, s)
	} else {
		err = writeStatsText(stdout, path, s)
	}
	if err != nil {
		return err
	}
	if readErr != nil {
		return fmt.Errorf("%w (the stats above come from the packets before it)", readErr)
	}
	if opts.failOnLoss {
		if msg := s.LossSummary(); msg != "" {
			return exitCodeError{exitDataLoss, fmt.Errorf("%s: data loss: %s", path, msg)}
		}
	}
	return nil
}

func writeStatsText(w io.Writer, path string, s *tracefile.StatsScan) error {
	last := s.Last()
	fmt.Fprintf(w, "trace %s: %d packet(s) read (compression %s), %d TraceStats packet(s)", path, s.Packets, s.Compression, s.StatsPackets)
	if s.Truncated != nil {
		fmt.Fprint(w, ", TRUNCATED")
	}
	fmt.Fprintf(w, "; last TraceStats at offset %d\n", last.Offset)
	tables := s.Stats
	if len(tables) > 1 {
		for i, st := range tables {
			fmt.Fprintf(w, "\nTraceStats %d of %d, at offset %d%s:\n", i+1, len(tables), st.Offset, machineLabel(s, st.Machine))
			if err := tracefile.WriteLossTableContext(w, tracefile.LossReport(st.Stats), s.LossContext); err != nil {
				return err
			}
		}
	}
	switch {
	case s.MultiMachine():
		if err := writeMachines(w, s); err != nil {
			return err
		}
	case len(tables) <= 1:
		fmt.Fprintln(w)
		if err := tracefile.WriteLossTableContext(w, s.LossRows(), s.LossContext); err != nil {
			return err
		}
	}
	writeReceived(w, s)
	writeProducerErrors(w, last.Stats)
	fmt.Fprintln(w)
	if s.DroppedPackets == 0 {
		_, err := fmt.Fprintln(w, "previous_packet_dropped: no packet flagged")
		return err
	}
	fmt.Fprintf(w, "previous_packet_dropped: %d packet(s) flagged on %d sequence(s)\n", s.DroppedPackets, len(s.Dropped))
	for _, id := range s.Sequences() {
		n := 0
		var reasons []string
		for _, m := range s.Reasons(id) {
			c := s.Dropped[id][m]
			n += c
			reasons = append(reasons, fmt.Sprintf("%s: %d", tracefile.LossReasonString(m), c))
		}
		fmt.Fprintf(w, "  sequence %d: %d packet(s) (%s)\n", id, n, strings.Join(reasons, ", "))
	}
	return nil
}

// JSON rows of `stats --json`, one object per line.
type (
	statsJSONTrace struct {
		Type              string `json:"type"` // "trace"
		File              string `json:"file"`
		Compression       string `json:"compression"`
		Packets           int    `json:"packets"`
		TraceStatsPackets int    `json:"trace_stats_packets"`
		Truncated         bool   `json:"truncated"`
		DroppedPackets    int    `json:"previous_packet_dropped_packets"`
	}
	statsJSONCounter struct {
		Type       string `json:"type"`        // "counter"
		TraceStats int    `json:"trace_stats"` // 0-based index among the TraceStats packets printed
		Offset     int64  `json:"offset"`      // of that TraceStats packet
		Scope      string `json:"scope"`       // "service" or "buffer"
		Index      int    `json:"index"`       // buffer index, -1 for service-level counters
		Counter    string `json:"counter"`
		Severity   string `json:"severity"`
		Value      uint64 `json:"value"`
		Lost       bool   `json:"lost"`
		// RingOverwrite marks a lost row that is a ring buffer read once
		// overwriting its oldest data (tracefile.LossContext).
		RingOverwrite bool `json:"ring_overwrite,omitempty"`
		// MachineID is the machine_id of the TraceStats' packet (0:
		// none); with several machines (a merged trace) each machine's
		// last TraceStats is listed.
		MachineID uint32 `json:"machine_id,omitempty"`
	}
	statsJSONDropped struct {
		Type     string `json:"type"` // "previous_packet_dropped"
		Sequence uint32 `json:"sequence"`
		Mask     uint32 `json:"mask"`
		Reason   string `json:"reason"`
		Packets  int    `json:"packets"`
	}
)

func writeStatsJSON(w io.Writer, path string, s *tracefile.StatsScan) error {
	enc := json.NewEncoder(w)
	err := enc.Encode(statsJSONTrace{
		Type: "trace", File: path, Compression: s.Compression.String(), Packets: s.Packets,
		TraceStatsPackets: s.StatsPackets, Truncated: s.Truncated != nil, DroppedPackets: s.DroppedPackets,
	})
	if err != nil {
		return err
	}
	type table struct {
		at   tracefile.StatsAt
		rows []tracefile.LossRow
	}
	var tables []table
	switch {
	case s.MultiMachine() && len(s.Stats) <= 1:
		for _, id := range s.MachineIDs() {
			m := s.Machines[id]
			tables = append(tables, table{*m.Last, m.Rows()})
		}
	case len(s.Stats) == 1:
		tables = append(tables, table{s.Stats[0], s.LossRows()})
	default:
		for _, st := range s.Stats {
			tables = append(tables, table{st, tracefile.LossReport(st.Stats)})
		}
	}
	for i, tb := range tables {
		for _, r := range tb.rows {
			scope := "service"
			if r.Index >= 0 {
				scope = "buffer"
			}
			err := enc.Encode(statsJSONCounter{
				Type: "counter", TraceStats: i, Offset: tb.at.Offset, Scope: scope, Index: r.Index,
				Counter: r.Name, Severity: r.Severity, Value: r.Value, Lost: r.Lost(), RingOverwrite: r.Lost() && s.LossContext.RingOverwrite(r), MachineID: tb.at.Machine,
			})
			if err != nil {
				return err
			}
		}
	}
	for _, id := range s.Sequences() {
		for _, m := range s.Reasons(id) {
			err := enc.Encode(statsJSONDropped{
				Type: "previous_packet_dropped", Sequence: id, Mask: m,
				Reason: tracefile.LossReasonString(m), Packets: s.Dropped[id][m],
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// writeProducerErrors prints what went wrong with each data source that
// failed (to start, or died, or did not stop): the counters say how often,
// this says why.
func writeProducerErrors(w io.Writer, ts tracefile.TraceStats) {
	if ts.Tracepipe == nil {
		return
	}
	for _, p := range ts.Tracepipe.Producers {
		if p.Error != "" {
			fmt.Fprintf(w, "data_sources[%d] (%s): %s\n", p.Index, p.Source, p.Error)
		}
	}
	// Another sink of the session (a relay or nats destination) lost
	// packets or failed: this file is complete, that copy is not.
	for _, p := range ts.Tracepipe.PeerSinks {
		fmt.Fprintf(w, "sinks[%d] (%s): another copy of this session: %d packets delivered, %d lost", p.Index, p.Destination, p.PacketsWritten, p.PacketsDropped)
		if p.Error != "" {
			fmt.Fprintf(w, "; FAILED: %s", p.Error)
		}
		fmt.Fprintln(w)
	}
}
