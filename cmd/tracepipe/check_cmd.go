package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/tracepipe/tracepipe/tpimport"
)

const checkLong = `Predict what Perfetto's trace_processor will do with each trace file
(plain, gzip or zstd), from the import rules in docs/import-rules.md:
packets skipped per sequence and why
(SEQ_NEEDS_INCREMENTAL_STATE on an invalid sequence), interned ids no
interned_data defines, tracks without descriptors, counter events before
their counter descriptor, missing clock snapshots and unconvertible clocks,
packets a ProtoVM replaces by its state (run on the real VM), the error,
data_loss and notice stats trace_processor will raise (e.g.
config_write_into_file_no_flush), payloads strict protobuf decoders reject,
and producer timestamps far from the session's clocks.

Memory is bounded: --max-sequences sequences are tracked one by one (the
packets of further sequences are checked with less state, and the report
says how many were summarised), and at most --max-packet-buffer bytes of one
packet are held (fields of a longer packet that do not fit are skipped
unread, and reported).

Several files (e.g. a rotated set) are each checked on their own, as
trace_processor opens each on its own. A truncated file is checked up to its
last whole packet and reported.

Exit codes: 0 every file clean, 3 problems found, 1 a file could not be read.`

// newCheckCmd builds `tracepipe check`.
func newCheckCmd() *cobra.Command {
	var (
		asJSON  bool
		slack   int64
		maxSeqs int
		maxBuf  int
	)
	c := &cobra.Command{
		Use:   "check TRACE...",
		Short: "Predict trace_processor's import of traces: skipped packets, unresolved iids, error stats",
		Long:  checkLong,
		Example: `  tracepipe check trace.pftrace
  tracepipe check --json out/ring-*.pftrace.gz`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if maxSeqs < 1 {
				return usageError{fmt.Errorf("--max-sequences must be >= 1, got %d", maxSeqs)}
			}
			if maxBuf < 1 {
				return usageError{fmt.Errorf("--max-packet-buffer must be >= 1, got %d", maxBuf)}
			}
			opts := tpimport.Options{ClockSlackNs: slack, MaxSequences: maxSeqs, MaxPacketBuffer: maxBuf}
			return runCheck(args, opts, asJSON, cmd.OutOrStdout())
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON report per file, one per line")
	c.Flags().Int64Var(&slack, "clock-slack-ns", 0, "how far producer timestamps may lie outside the session's clock range (0: 60 s, < 0: no check)")
	c.Flags().IntVar(&maxSeqs, "max-sequences", tpimport.DefaultMaxSequences, "sequences tracked one by one; the packets of further sequences are checked together, with less state, and reported as summarised")
	c.Flags().IntVar(&maxBuf, "max-packet-buffer", tpimport.DefaultMaxPacketBuffer, "bytes held of one packet; fields of a longer packet that do not fit are skipped unread and reported")
	return c
}

func runCheck(paths []string, opts tpimport.Options, asJSON bool, out io.Writer) error {
	problems := 0
	var firstErr error
	enc := json.NewEncoder(out)
	for _, p := range paths {
		r, err := tpimport.CheckFile(p, opts)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			if r == nil {
				fmt.Fprintf(out, "%s: error: %v\n", p, err)
				continue
			}
		}
		if !r.Clean() {
			problems++
		}
		if asJSON {
			if err := enc.Encode(r); err != nil {
				return err
			}
			continue
		}
		if err := r.WriteText(out); err != nil {
			return err
		}
	}
	if firstErr != nil {
		return firstErr
	}
	if problems > 0 {
		return exitCodeError{code: exitProblems, err: fmt.Errorf("check: %d of %d trace(s) have problems", problems, len(paths))}
	}
	return nil
}
