package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/tracepipe/tracepipe/tracefile"
)

// `stats` and `inspect` given several files (a rotated set; see
// tracefile/traceset.go) print each file's own line, then the set as one
// trace, in rotation order.

// traceArgs accepts one or more trace files.
func traceArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return usageError{fmt.Errorf("%s takes one or more trace files (a rotated set: out/t*.pftrace), got none", cmd.CommandPath())}
	}
	return nil
}

// fileCounters is one line about one file of a set: its packets and what
// its last TraceStats says the sink had written by then.
func fileCounters(w io.Writer, path string, s *tracefile.StatsScan) {
	size := int64(-1)
	if st, err := os.Stat(path); err == nil {
		size = st.Size()
	}
	fmt.Fprintf(w, "file %s: %d packet(s), %d bytes on disk", filepath.Clean(path), s.Packets, size)
	if s.Truncated != nil {
		fmt.Fprint(w, ", TRUNCATED")
	}
	if last := s.Last(); last != nil && last.Stats.Tracepipe != nil {
		tp := last.Stats.Tracepipe
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
	paths = tracefile.RotationOrder(paths)
	set := &tracefile.StatsScan{}
	var errs []error
	for _, p := range paths {
		s, err := tracefile.ScanStats(p, opts.scanOptions())
		if s == nil {
			return err
		}
		if err != nil {
			errs = append(errs, err)
		}
		if !opts.json {
			fileCounters(stdout, p, s)
		}
		if s.Truncated != nil {
			fmt.Fprintf(stderr, "tracepipe: warning: %s is truncated (%v)\n", p, s.Truncated)
		}
		if s.ElidedPackets > 0 {
			fmt.Fprintf(stderr, "tracepipe: warning: %s: %d packet(s) longer than the packet buffer: %d bytes of their fields skipped unread (raise with --max-packet-buffer)\n", p, s.ElidedPackets, s.ElidedBytes)
		}
		set.Add(s, opts.all)
	}
	name := fmt.Sprintf("set of %d files (%s ... %s)", len(paths), paths[0], paths[len(paths)-1])
	if set.Last() == nil {
		return fmt.Errorf("%s: no TraceStats packet in %d packet(s)", name, set.Packets)
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
		if msg := set.LossSummary(); msg != "" {
			return exitCodeError{exitDataLoss, fmt.Errorf("%s: data loss: %s", name, msg)}
		}
	}
	return nil
}

// runInspectSet summarises each file, then the set as one trace.
func runInspectSet(paths []string, textOpts tracefile.SummaryOptions, stdout, stderr io.Writer) error {
	paths = tracefile.RotationOrder(paths)
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
		set = tracefile.MergeSummary(set, s)
	}
	fmt.Fprintf(stdout, "\ntrace set of %d files (%s ... %s), as one trace\n", len(paths), paths[0], paths[len(paths)-1])
	return set.WriteText(stdout)
}
