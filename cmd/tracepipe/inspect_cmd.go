package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/tracepipe/tracepipe/tracefile"
)

const inspectLong = `Summarise a trace file (plain, gzip or zstd): totals, the time range of the
packets' timestamps, one row per trusted_packet_sequence_id (packets, bytes,
first and last packet, packets flagged previous_packet_dropped and their loss
reasons), packet kinds (the payload field), one line on the last TraceStats
packet's loss counters (--stats: the whole table, as 'tracepipe stats'
prints it), and the first packets rendered as text with their fields named
(--skip-service: data packets only, without the service's clock snapshots,
trace_config, system_info, ...).

Timestamps are shown as written (nanoseconds, whatever their clock) and in
seconds: the trace's range since boot, each sequence's first and last packet
after the trace's first timestamp. A truncated trace is summarised up to its
last complete packet and reported on stderr (exit 0).

Several files (a rotated set, e.g. out/t.pftrace*) are summarised one line
per file, then as one trace, in rotation order.`

// newInspectCmd builds `tracepipe inspect`.
func newInspectCmd() *cobra.Command {
	var first int
	var skipService, stats bool
	var limits readLimits
	c := &cobra.Command{
		Use:   "inspect TRACE...",
		Short: "Summarise a trace: sequences, sizes, time range, kinds, first packets",
		Long:  inspectLong,
		Example: `  tracepipe inspect trace.pftrace
  tracepipe inspect --skip-service -n 3 trace.pftrace
  tracepipe inspect --packets 0 --stats trace.pftrace.gz`,
		Args: traceArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if first < 0 {
				return usageError{fmt.Errorf("--packets must be >= 0, got %d", first)}
			}
			if err := limits.validate(); err != nil {
				return err
			}
			opts := tracefile.SummaryOptions{FirstN: first, SkipService: skipService, Stats: stats}
			limits.apply(&opts)
			if first == 0 {
				opts.FirstN = -1 // SummaryOptions: 0 means the default, < 0 none
			}
			if len(args) > 1 {
				return runInspectSet(args, opts, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			return runInspect(args[0], opts, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	c.Flags().IntVarP(&first, "packets", "n", tracefile.DefaultSummaryPackets, "how many leading packets to print as text (0: none)")
	c.Flags().BoolVar(&skipService, "skip-service", false, "leave the service's own packets (sequence 1) out of the packets printed as text")
	c.Flags().BoolVar(&stats, "stats", false, "print the last TraceStats packet's whole loss table (default: one line)")
	limits.register(c.Flags())
	return c
}

func runInspect(path string, opts tracefile.SummaryOptions, stdout, stderr io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var size int64 = -1
	if st, err := f.Stat(); err == nil {
		size = st.Size()
	}
	s, readErr := tracefile.SummarizeOptions(f, opts)
	if s == nil {
		return fmt.Errorf("%s: %w", path, readErr)
	}
	if s.Truncated {
		fmt.Fprintf(stderr, "tracepipe: warning: %s is truncated (%v); summarising the %d complete packet(s) before it\n", path, s.TruncatedErr, s.Packets)
	}
	if s.BadPackets > 0 {
		fmt.Fprintf(stderr, "tracepipe: warning: %s: %d packet(s) could not be decoded\n", path, s.BadPackets)
	}
	fmt.Fprintf(stdout, "trace %s", path)
	if size >= 0 {
		fmt.Fprintf(stdout, " (%d bytes on disk)", size)
	}
	fmt.Fprintln(stdout)
	if err := s.WriteText(stdout); err != nil {
		return err
	}
	if readErr != nil {
		return fmt.Errorf("%s: %w (the summary above covers the packets before it)", path, readErr)
	}
	return nil
}
