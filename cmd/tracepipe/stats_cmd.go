package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
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

// statsAt is one decoded TraceStats packet and where it was.
type statsAt struct {
	offset  int64 // record offset in the (decompressed) Trace stream
	ts      tracefile.TraceStats
	machine uint32 // the packet's machine_id (0: none)
}

// statsScan is what `stats` learns from one pass over a trace.
type statsScan struct {
	compression  tracefile.Compression
	packets      int
	badPackets   int       // records whose TracePacket did not parse
	statsPackets int       // packets carrying trace_stats
	badStats     int       // of those, how many did not decode
	badStatsErr  error     // the first such error
	stats        []statsAt // every decoded one with keepAll, else the last
	// dropped counts, per trusted_packet_sequence_id, the packets flagged
	// with previous_packet_dropped by loss mask.
	dropped        map[uint32]map[uint32]int
	droppedPackets int
	truncated      error // the ErrTruncated error, if the input was cut
	// lossCtx, from the first trace_config packet, tells the overwrites
	// of a ring buffer read once from losses (presentation only).
	lossCtx tracefile.LossContext
	// packets longer than the packet buffer, and the bytes of their fields
	// skipped unread
	elidedPackets int
	elidedBytes   int64
	// machines: per machine_id, its packets, last TraceStats and the
	// receiver's sections (stats_machines.go).
	machines map[uint32]*machineStats
}

// scanTrace reads every packet of the trace at path. It returns the scan
// of what was readable together with any reader error other than
// truncation (which is recorded in statsScan.truncated).
func scanTrace(path string, opts statsOptions) (*statsScan, error) {
	keepAll := opts.all
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := &statsScan{dropped: map[uint32]map[uint32]int{}}
	keep := opts.maxPacketBuffer
	if keep <= 0 {
		keep = tracefile.DefaultMaxPacketBuffer
	}
	rd, err := tracefile.NewReaderOptions(f, tracefile.ReaderOptions{MaxPacketBuffer: keep})
	if err != nil {
		if errors.Is(err, tracefile.ErrTruncated) {
			s.truncated = err
			return s, nil
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer rd.Close()
	s.compression = rd.Compression()
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return s, nil
		}
		if errors.Is(err, tracefile.ErrTruncated) {
			s.truncated = err
			return s, nil
		}
		if err != nil {
			return s, fmt.Errorf("%s: %w", path, err)
		}
		s.add(rec, keepAll)
	}
}

func (s *statsScan) add(rec tracefile.Record, keepAll bool) {
	s.packets++
	if rec.Elided > 0 {
		s.elidedPackets++
		s.elidedBytes += rec.Elided
	}
	info, err := tracefile.DecodePacket(rec.Packet)
	if err != nil {
		s.badPackets++
		return
	}
	s.machine(info.MachineID).packets++
	if m := info.PreviousPacketDropped; m != 0 {
		s.droppedPackets++
		bySeq := s.dropped[info.SequenceID]
		if bySeq == nil {
			bySeq = map[uint32]int{}
			s.dropped[info.SequenceID] = bySeq
		}
		bySeq[m]++
	}
	if info.PayloadField == tracefile.FieldTraceConfig && !s.lossCtx.Known {
		s.lossCtx, _ = tracefile.DecodeLossContext(info.Payload)
	}
	if info.PayloadField != tracefile.FieldTraceStats {
		return
	}
	s.statsPackets++
	if rec.Elided > 0 && len(info.Payload) == 0 {
		s.badStats++ // skipped unread: never read as a TraceStats of zeros
		if s.badStatsErr == nil {
			s.badStatsErr = fmt.Errorf("TraceStats packet at offset %d: %d bytes, longer than the packet buffer: skipped unread (raise with --max-packet-buffer)", rec.Offset, rec.Size)
		}
		return
	}
	ts, _, err := tracefile.DecodeTraceStatsPacket(rec.Packet)
	if err != nil {
		s.badStats++
		if s.badStatsErr == nil {
			s.badStatsErr = fmt.Errorf("TraceStats packet at offset %d: %w", rec.Offset, err)
		}
		return
	}
	at := statsAt{offset: rec.Offset, ts: ts, machine: info.MachineID}
	if sender := s.noteTraceStats(info.MachineID, at); !sender && !keepAll && len(s.stats) > 0 {
		return // a receiver's section alone: the sender's counters stay the last
	}
	if !keepAll {
		s.stats = s.stats[:0]
	}
	s.stats = append(s.stats, at)
}

// last returns the last decoded TraceStats packet, or nil.
func (s *statsScan) last() *statsAt {
	if len(s.stats) == 0 {
		return nil
	}
	return &s.stats[len(s.stats)-1]
}

// sequences returns the ids of the sequences with dropped packets, sorted.
func (s *statsScan) sequences() []uint32 {
	ids := make([]uint32, 0, len(s.dropped))
	for id := range s.dropped {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// reasons returns the loss masks seen on sequence id, ordered by their
// rendering.
func (s *statsScan) reasons(id uint32) []uint32 {
	masks := make([]uint32, 0, len(s.dropped[id]))
	for m := range s.dropped[id] {
		masks = append(masks, m)
	}
	sort.Slice(masks, func(i, j int) bool {
		return tracefile.LossReasonString(masks[i]) < tracefile.LossReasonString(masks[j])
	})
	return masks
}

func runStats(path string, opts statsOptions, stdout, stderr io.Writer) error {
	s, readErr := scanTrace(path, opts)
	if s == nil {
		return readErr
	}
	if s.truncated != nil {
		fmt.Fprintf(stderr, "tracepipe: warning: %s is truncated (%v); the stats below come from the last complete TraceStats packet, the session's final one may be missing\n", path, s.truncated)
	}
	if s.badPackets > 0 {
		fmt.Fprintf(stderr, "tracepipe: warning: %s: %d packet(s) could not be decoded\n", path, s.badPackets)
	}
	if s.elidedPackets > 0 {
		fmt.Fprintf(stderr, "tracepipe: warning: %s: %d packet(s) longer than the packet buffer: %d bytes of their fields skipped unread (raise with --max-packet-buffer)\n", path, s.elidedPackets, s.elidedBytes)
	}
	if s.badStats > 0 {
		fmt.Fprintf(stderr, "tracepipe: warning: %s: %d TraceStats packet(s) could not be decoded; first: %v\n", path, s.badStats, s.badStatsErr)
	}
	last := s.last()
	if last == nil {
		if readErr != nil {
			return readErr
		}
		if s.statsPackets > 0 {
			return fmt.Errorf("%s: none of its %d TraceStats packet(s) could be decoded: %w", path, s.statsPackets, s.badStatsErr)
		}
		return fmt.Errorf("%s: no TraceStats packet in %d packet(s) read: the service writes one when the session stops; was the trace cut before the session ended?", path, s.packets)
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
		if msg := lossSummary(s); msg != "" {
			return exitCodeError{exitDataLoss, fmt.Errorf("%s: data loss: %s", path, msg)}
		}
	}
	return nil
}

// lossSummary names what lost data in the last TraceStats packet and the
// flagged packets, or returns "" when nothing did. Overwrites of a ring
// buffer read once (tracefile.LossContext) are the ring doing its job,
// not a loss: trace_processor and `check` do not report them either.
func lossSummary(s *statsScan) string {
	var parts []string
	if s.multiMachine() {
		parts = s.machineLoss()
	} else {
		for _, r := range s.lossRows() {
			if s.lossCtx.Lost(r) {
				parts = append(parts, fmt.Sprintf("%s %s=%d", rowScope(r), r.Name, r.Value))
			}
		}
		for _, id := range s.machineIDs() {
			parts = append(parts, s.machines[id].gaps()...)
		}
	}
	if s.droppedPackets > 0 {
		ids := s.sequences()
		names := make([]string, len(ids))
		for i, id := range ids {
			names[i] = strconv.FormatUint(uint64(id), 10)
		}
		parts = append(parts, fmt.Sprintf("%d packet(s) with previous_packet_dropped (sequence %s)", s.droppedPackets, strings.Join(names, ", ")))
	}
	return strings.Join(parts, ", ")
}

// rowScope renders where a counter belongs, as WriteLossTable does.
func rowScope(r tracefile.LossRow) string {
	if r.Index < 0 {
		return "service"
	}
	return "buffer " + strconv.Itoa(r.Index)
}

func writeStatsText(w io.Writer, path string, s *statsScan) error {
	last := s.last()
	fmt.Fprintf(w, "trace %s: %d packet(s) read (compression %s), %d TraceStats packet(s)", path, s.packets, s.compression, s.statsPackets)
	if s.truncated != nil {
		fmt.Fprint(w, ", TRUNCATED")
	}
	fmt.Fprintf(w, "; last TraceStats at offset %d\n", last.offset)
	tables := s.stats
	if len(tables) > 1 {
		for i, st := range tables {
			fmt.Fprintf(w, "\nTraceStats %d of %d, at offset %d%s:\n", i+1, len(tables), st.offset, s.machineLabel(st.machine))
			if err := tracefile.WriteLossTableContext(w, tracefile.LossReport(st.ts), s.lossCtx); err != nil {
				return err
			}
		}
	}
	switch {
	case s.multiMachine():
		if err := writeMachines(w, s); err != nil {
			return err
		}
	case len(tables) <= 1:
		fmt.Fprintln(w)
		if err := tracefile.WriteLossTableContext(w, s.lossRows(), s.lossCtx); err != nil {
			return err
		}
	}
	writeReceived(w, s)
	writeProducerErrors(w, last.ts)
	fmt.Fprintln(w)
	if s.droppedPackets == 0 {
		_, err := fmt.Fprintln(w, "previous_packet_dropped: no packet flagged")
		return err
	}
	fmt.Fprintf(w, "previous_packet_dropped: %d packet(s) flagged on %d sequence(s)\n", s.droppedPackets, len(s.dropped))
	for _, id := range s.sequences() {
		n := 0
		var reasons []string
		for _, m := range s.reasons(id) {
			c := s.dropped[id][m]
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

func writeStatsJSON(w io.Writer, path string, s *statsScan) error {
	enc := json.NewEncoder(w)
	err := enc.Encode(statsJSONTrace{
		Type: "trace", File: path, Compression: s.compression.String(), Packets: s.packets,
		TraceStatsPackets: s.statsPackets, Truncated: s.truncated != nil, DroppedPackets: s.droppedPackets,
	})
	if err != nil {
		return err
	}
	type table struct {
		at   statsAt
		rows []tracefile.LossRow
	}
	var tables []table
	switch {
	case s.multiMachine() && len(s.stats) <= 1:
		for _, id := range s.machineIDs() {
			m := s.machines[id]
			tables = append(tables, table{*m.last, m.rows()})
		}
	case len(s.stats) == 1:
		tables = append(tables, table{s.stats[0], s.lossRows()})
	default:
		for _, st := range s.stats {
			tables = append(tables, table{st, tracefile.LossReport(st.ts)})
		}
	}
	for i, tb := range tables {
		for _, r := range tb.rows {
			scope := "service"
			if r.Index >= 0 {
				scope = "buffer"
			}
			err := enc.Encode(statsJSONCounter{
				Type: "counter", TraceStats: i, Offset: tb.at.offset, Scope: scope, Index: r.Index,
				Counter: r.Name, Severity: r.Severity, Value: r.Value, Lost: r.Lost(), RingOverwrite: r.Lost() && s.lossCtx.RingOverwrite(r), MachineID: tb.at.machine,
			})
			if err != nil {
				return err
			}
		}
	}
	for _, id := range s.sequences() {
		for _, m := range s.reasons(id) {
			err := enc.Encode(statsJSONDropped{
				Type: "previous_packet_dropped", Sequence: id, Mask: m,
				Reason: tracefile.LossReasonString(m), Packets: s.dropped[id][m],
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
