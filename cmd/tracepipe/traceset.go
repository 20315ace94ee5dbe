package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/tracefile"
)

// A trace set is the files one rotating file sink wrote: t.pftrace,
// t.1.pftrace, t.2.pftrace, ... (sinks.FileName) Each file is self-contained (service packets, restore
// packets, a TraceStats at its end); `stats` and `inspect` given several
// files report the set as one trace, in rotation order, plus each file's
// own counters.

// traceArgs accepts one or more trace files.
func traceArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return usageError{fmt.Errorf("%s takes one or more trace files (a rotated set: out/t*.pftrace), got none", cmd.CommandPath())}
	}
	return nil
}

// rotationOrder sorts the files of a set as the sink wrote them: by name
// without the rotation index, then by the index (t.pftrace before
// t.2.pftrace before t.10.pftrace; a shell glob sorts .10 first).
func rotationOrder(paths []string) []string {
	out := slices.Clone(paths)
	slices.SortStableFunc(out, func(a, b string) int {
		ba, na := sinks.SplitFileName(a)
		bb, nb := sinks.SplitFileName(b)
		if c := strings.Compare(ba, bb); c != 0 {
			return c
		}
		return na - nb
	})
	return out
}

// fileCounters is one line about one file of a set: its packets and what
// its last TraceStats says the sink had written by then.
func fileCounters(w io.Writer, path string, s *statsScan) {
	size := int64(-1)
	if st, err := os.Stat(path); err == nil {
		size = st.Size()
	}
	fmt.Fprintf(w, "file %s: %d packet(s), %d bytes on disk", filepath.Clean(path), s.packets, size)
	if s.truncated != nil {
		fmt.Fprint(w, ", TRUNCATED")
	}
	if last := s.last(); last != nil && last.ts.Tracepipe != nil {
		tp := last.ts.Tracepipe
		fmt.Fprintf(w, "; its last TraceStats: sink_packets_written %d, sink_packets_dropped %d, sink_packets_filtered %d, sink_errors %d",
			tp.SinkPacketsWritten, tp.SinkPacketsDropped, tp.SinkPacketsFiltered, tp.SinkErrors)
	} else {
		fmt.Fprint(w, "; no TraceStats")
	}
	fmt.Fprintln(w)
}

// runStatsSet prints each file's counters, then the set as one trace: the
// loss table of the last TraceStats of the last file, and every flagged
// packet of every file.
func runStatsSet(paths []string, opts statsOptions, stdout, stderr io.Writer) error {
	paths = rotationOrder(paths)
	set := &statsScan{dropped: map[uint32]map[uint32]int{}}
	var errs []error
	for i, p := range paths {
		s, err := scanTrace(p, opts)
		if s == nil {
			return err
		}
		if err != nil {
			errs = append(errs, err)
		}
		if !opts.json {
			fileCounters(stdout, p, s)
		}
		if s.truncated != nil {
			fmt.Fprintf(stderr, "tracepipe: warning: %s is truncated (%v)\n", p, s.truncated)
			if i < len(paths)-1 {
				set.truncated = s.truncated
			}
		}
		if i == len(paths)-1 && s.truncated != nil {
			set.truncated = s.truncated
		}
		if s.elidedPackets > 0 {
			fmt.Fprintf(stderr, "tracepipe: warning: %s: %d packet(s) longer than the packet buffer: %d bytes of their fields skipped unread (raise with --max-packet-buffer)\n", p, s.elidedPackets, s.elidedBytes)
		}
		set.compression = s.compression
		if !set.lossCtx.Known {
			set.lossCtx = s.lossCtx
		}
		set.packets += s.packets
		set.badPackets += s.badPackets
		set.statsPackets += s.statsPackets
		set.badStats += s.badStats
		if set.badStatsErr == nil {
			set.badStatsErr = s.badStatsErr
		}
		if opts.all {
			set.stats = append(set.stats, s.stats...)
		} else if len(s.stats) > 0 {
			set.stats = s.stats
		}
		for id, m := range s.dropped {
			if set.dropped[id] == nil {
				set.dropped[id] = map[uint32]int{}
			}
			for mask, n := range m {
				set.dropped[id][mask] += n
			}
		}
		set.droppedPackets += s.droppedPackets
	}
	name := fmt.Sprintf("set of %d files (%s ... %s)", len(paths), paths[0], paths[len(paths)-1])
	if set.last() == nil {
		return fmt.Errorf("%s: no TraceStats packet in %d packet(s)", name, set.packets)
	}
	var err error
	if opts.json {
		err = writeStatsJSON(stdout, name, set)
	} else {
		fmt.Fprintln(stdout)
		err = writeStatsText(stdout, name, set)
	}
	if err != nil {
		return err
	}
	if len(errs) > 0 {
		return errs[0]
	}
	if opts.failOnLoss {
		if msg := lossSummary(set); msg != "" {
			return exitCodeError{exitDataLoss, fmt.Errorf("%s: data loss: %s", name, msg)}
		}
	}
	return nil
}

// runInspectSet summarises each file, then the set as one trace.
func runInspectSet(paths []string, textOpts tracefile.SummaryOptions, stdout, stderr io.Writer) error {
	paths = rotationOrder(paths)
	var set *tracefile.Summary
	for i, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		opts := textOpts
		if i > 0 {
			opts.FirstN = -1
		}
		s, readErr := tracefile.SummarizeOptions(f, opts)
		f.Close()
		if s == nil {
			return fmt.Errorf("%s: %w", p, readErr)
		}
		if s.Truncated {
			fmt.Fprintf(stderr, "tracepipe: warning: %s is truncated (%v)\n", p, s.TruncatedErr)
		}
		fmt.Fprintf(stdout, "file %s: %d packet(s), %d sequence(s)", p, s.Packets, len(s.Sequences))
		if ts := s.LastTraceStats; ts != nil && ts.Tracepipe != nil {
			fmt.Fprintf(stdout, "; its last TraceStats: sink_packets_written %d", ts.Tracepipe.SinkPacketsWritten)
		}
		fmt.Fprintln(stdout)
		set = mergeSummary(set, s)
	}
	fmt.Fprintf(stdout, "\ntrace set of %d files (%s ... %s), as one trace\n", len(paths), paths[0], paths[len(paths)-1])
	return set.WriteText(stdout)
}

// mergeSummary adds the summary of the next file of a set to acc.
func mergeSummary(acc, s *tracefile.Summary) *tracefile.Summary {
	if acc == nil {
		return s
	}
	acc.Packets += s.Packets
	acc.Bytes += s.Bytes
	acc.StreamBytes += s.StreamBytes
	if s.HasTimestamps {
		if !acc.HasTimestamps || s.MinTimestamp < acc.MinTimestamp {
			acc.MinTimestamp = s.MinTimestamp
		}
		acc.MaxTimestamp = max(acc.MaxTimestamp, s.MaxTimestamp)
		acc.HasTimestamps = true
	}
	acc.PreviousPacketDropped += s.PreviousPacketDropped
	for _, q := range s.Sequences {
		i := slices.IndexFunc(acc.Sequences, func(a tracefile.SequenceSummary) bool { return a.ID == q.ID })
		if i < 0 {
			acc.Sequences = append(acc.Sequences, q)
			continue
		}
		a := &acc.Sequences[i]
		if q.HasTimestamps {
			if !a.HasTimestamps || q.MinTimestamp < a.MinTimestamp {
				a.MinTimestamp = q.MinTimestamp
			}
			a.MaxTimestamp = max(a.MaxTimestamp, q.MaxTimestamp)
			a.HasTimestamps = true
		}
		a.Packets += q.Packets
		a.Bytes += q.Bytes
		a.PreviousPacketDropped += q.PreviousPacketDropped
		a.LossBits |= q.LossBits
	}
	slices.SortFunc(acc.Sequences, func(a, b tracefile.SequenceSummary) int { return int(a.ID) - int(b.ID) })
	for k, n := range s.Kinds {
		acc.Kinds[k] += n
	}
	acc.BadPackets += s.BadPackets
	acc.SkippedFields += s.SkippedFields
	acc.SummarisedSequences += s.SummarisedSequences // per file: an upper bound for the set
	acc.ElidedPackets += s.ElidedPackets
	acc.ElidedBytes += s.ElidedBytes
	acc.TraceStatsPackets += s.TraceStatsPackets
	if s.LastTraceStats != nil {
		acc.LastTraceStats = s.LastTraceStats
	}
	acc.Truncated = acc.Truncated || s.Truncated
	if acc.TruncatedErr == nil {
		acc.TruncatedErr = s.TruncatedErr
	}
	return acc
}
