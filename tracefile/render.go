package tracefile

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"text/tabwriter"
)

// WriteLossTable renders rows as an aligned text table (the body of
// `tracepipe stats`): columns SCOPE, COUNTER, SEVERITY, VALUE. Rows with
// actual loss are marked with "!" in the first column. A closing line
// sums up the data loss.
func WriteLossTable(w io.Writer, rows []LossRow) error {
	return WriteLossTableContext(w, rows, LossContext{})
}

// WriteLossTableContext is WriteLossTable for a trace whose session is
// known (see LossContext): the counters are the same, but overwrites of
// a ring buffer read once are marked "~", not "!", and the closing line
// (LossHeadline) tells them apart from losses.
func WriteLossTableContext(w io.Writer, rows []LossRow, c LossContext) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\tSCOPE\tCOUNTER\tSEVERITY\tVALUE")
	for _, r := range rows {
		mark := ""
		switch {
		case c.Lost(r):
			mark = "!"
		case r.Lost():
			mark = "~"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", mark, r.Scope(), r.Name, r.Severity, r.Value)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, LossHeadline(rows, c))
	return err
}

// WriteText renders the summary as aligned text (the body of
// `tracepipe inspect`): totals, a per-sequence table, packet kinds, the
// loss line of the last TraceStats (its whole table with
// SummaryOptions.Stats), and the first packets.
//
// Times are shown as written (nanoseconds) and, for people, in seconds:
// the trace's range as time since boot (BOOTTIME, the clock tracepipe and
// Perfetto stamp with), each sequence's first and last packet relative to
// the trace's first timestamp.
func (s *Summary) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "compression:\t%s\n", s.Compression)
	fmt.Fprintf(tw, "packets:\t%d\n", s.Packets)
	fmt.Fprintf(tw, "packet bytes:\t%d\n", s.Bytes)
	fmt.Fprintf(tw, "stream bytes:\t%d\n", s.StreamBytes)
	if s.HasTimestamps {
		span := int64(s.MaxTimestamp - s.MinTimestamp)
		fmt.Fprintf(tw, "timestamps:\t%d .. %d ns (%s .. %s since boot; span %s)\n", s.MinTimestamp, s.MaxTimestamp,
			NanosText(int64(s.MinTimestamp)), NanosText(int64(s.MaxTimestamp)), NanosText(span))
	} else {
		fmt.Fprintf(tw, "timestamps:\tnone\n")
	}
	fmt.Fprintf(tw, "previous_packet_dropped:\t%d packets\n", s.PreviousPacketDropped)
	fmt.Fprintf(tw, "trace_stats packets:\t%d\n", s.TraceStatsPackets)
	if s.BadPackets > 0 {
		fmt.Fprintf(tw, "malformed packets:\t%d\n", s.BadPackets)
	}
	if s.SkippedFields > 0 {
		fmt.Fprintf(tw, "skipped top-level fields:\t%d\n", s.SkippedFields)
	}
	if s.SummarisedSequences > 0 {
		fmt.Fprintf(tw, "summarised sequences:\tabout %d sequences beyond the %d tracked: their per-sequence rows were summarised in row \"others\" (raise with --max-sequences)\n", s.SummarisedSequences, s.MaxSequences)
	}
	if s.ElidedPackets > 0 {
		fmt.Fprintf(tw, "packets not read whole:\t%d longer than the packet buffer: %d bytes of their fields skipped unread (raise with --max-packet-buffer)\n", s.ElidedPackets, s.ElidedBytes)
	}
	if s.Truncated {
		fmt.Fprintf(tw, "TRUNCATED:\t%v\n", s.TruncatedErr)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "\nsequences: (FIRST, LAST: after the trace's first timestamp; sequence 1 is the service's)")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tPACKETS\tBYTES\tFIRST\tLAST\tDROPPED\tLOSS_BITS")
	for _, q := range s.Sequences {
		lo, hi := "-", "-"
		if q.HasTimestamps {
			lo, hi = "+"+NanosText(int64(q.MinTimestamp-s.MinTimestamp)), "+"+NanosText(int64(q.MaxTimestamp-s.MinTimestamp))
		}
		id := strconv.FormatUint(uint64(q.ID), 10)
		if q.Summarised {
			id = "others"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%d\t%s\n", id, q.Packets, q.Bytes, lo, hi, q.PreviousPacketDropped, LossReasonString(q.LossBits))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "\nkinds:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	kinds := make([]string, 0, len(s.Kinds))
	for k := range s.Kinds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		name := k
		if name == "" {
			name = "(none)"
		}
		fmt.Fprintf(tw, "%s\t%d\n", name, s.Kinds[k])
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if s.LastTraceStats != nil {
		rows := LossReport(*s.LastTraceStats)
		if s.opts.Stats {
			fmt.Fprintln(w, "\nlast trace_stats:")
			if err := WriteLossTableContext(w, rows, s.LossContext); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(w, "\nlast trace_stats: %s (every counter: tracepipe stats, or inspect --stats)\n", LossHeadline(rows, s.LossContext))
		}
	}
	if s.FirstSkipped > 0 {
		fmt.Fprintf(w, "\n(%d service packet(s) left out of the packets below)\n", s.FirstSkipped)
	}
	for _, p := range s.First {
		fmt.Fprintf(w, "\npacket %d at offset %d:\n%s", p.Index, p.Offset, p.Text)
	}
	return nil
}
