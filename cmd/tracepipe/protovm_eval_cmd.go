package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/internal/barchart"
	"github.com/tracepipe/tracepipe/protovm/eval"
)

const evalLong = `Replay a complete trace (recorded without loss; plain, gzip or zstd) through
a ring buffer of --buffer bytes (tracepipe's real TraceBuffer) and report
what survives the ring and what trace_processor imports of it, per the rules
of 'tracepipe check':

  baseline          no program: survivors whose incremental state was
                    overwritten are skipped
  PROG/restore      the program folds each sequence's overwritten packets;
                    the readback writes CLEARED + the state (+ the loss
                    flag) ahead of the sequence's first survivor
  PROG/protovms     (--protovms) Perfetto's path: one VM fed by every overwritten packet,
                    its state in a protovms packet; trace_processor offers
                    every survivor to the VM and replaces Ok ones by the state

Producer packets (trusted_packet_sequence_id > 1) are cut into 4 KiB chunks
per sequence in file order; service packets head the replayed trace.
Columns: packets survived, importable (imported intact by trace_processor),
share of the full trace's producer packets importable, NEEDS packets
skipped, failed iid lookups, restore packets, state bytes, patches
ok/error/abort and time per patch.`

// newProtoVMEvalCmd builds `tracepipe protovm eval`.
func newProtoVMEvalCmd() *cobra.Command {
	var (
		trace, bufSize, plotPath string
		programs                 []string
		asJSON, protoVMs         bool
		memKB                    uint32
	)
	c := &cobra.Command{
		Use:   "eval --trace FULL --buffer SIZE [--program P]...",
		Short: "Replay a complete trace through a ring buffer with and without programs; report what imports",
		Long:  evalLong,
		Example: `  tracepipe protovm eval --trace full.pftrace.gz --buffer 4MiB --program configs/protovm/interned_names.yaml
  tracepipe protovm eval --trace full.pftrace --buffer 1MiB --program a.yaml --program b.bin --json --plot eval.svg`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			size, err := config.ParseByteSize(bufSize)
			switch {
			case err != nil:
				return usageError{fmt.Errorf("--buffer %q: want a size like 4MiB (%v)", bufSize, err)}
			case size < evalMinBuffer || size > 4<<30:
				// The ring is a TraceBuffer: at most 4 GiB (buffer.New),
				// and it must hold one replayed chunk (4 KiB).
				return usageError{fmt.Errorf("--buffer %q: want a size from 4KiB (one chunk) to 4GiB, like 4MiB", bufSize)}
			case size%evalMinBuffer != 0:
				// buffer.New rounds up to whole pages, as traced does; say
				// so rather than replay a ring other than the one asked for.
				rounded := (size + evalMinBuffer - 1) / evalMinBuffer * evalMinBuffer
				fmt.Fprintf(cmd.ErrOrStderr(), "note: --buffer %s is rounded up to whole 4 KiB pages: %d bytes\n", bufSize, rounded)
			}
			if memKB == 0 {
				return usageError{fmt.Errorf("--memory-limit-kb must be > 0")}
			}
			if err := checkPlotPath(plotPath); err != nil {
				return err
			}
			res, err := runEval(trace, eval.Options{BufferSize: int(size), MemoryLimitKB: memKB, ProtoVMs: protoVMs}, programs, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if plotPath != "" {
				if err := plotEval(res, plotPath, trace, size); err != nil {
					return err
				}
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			return writeEvalTable(cmd.OutOrStdout(), res)
		},
	}
	c.Flags().StringVar(&trace, "trace", "", "complete trace to replay")
	c.Flags().StringVar(&bufSize, "buffer", "", "ring buffer size (e.g. 4MiB, 65536KiB)")
	c.Flags().StringArrayVar(&programs, "program", nil, "program to evaluate (.yaml/.yml description or compiled bytes); repeatable")
	c.Flags().Uint32Var(&memKB, "memory-limit-kb", 1024, "each VM's state memory limit (KiB)")
	c.Flags().BoolVar(&protoVMs, "protovms", false, "also evaluate each program on Perfetto's protovms path")
	c.Flags().BoolVar(&asJSON, "json", false, "print the results as JSON")
	c.Flags().StringVar(&plotPath, "plot", "", "write a bar chart of the importable shares to this file, SVG or PNG by its extension (.svg, .png)")
	_ = c.MarkFlagRequired("trace")
	_ = c.MarkFlagRequired("buffer")
	return c
}

// runEval loads the programs (in order: the first bad one is the error)
// and replays the trace at path, warning on stderr if it is truncated.
func runEval(path string, opts eval.Options, programs []string, stderr io.Writer) ([]eval.Result, error) {
	for _, p := range programs {
		code, err := loadProgram(p, nil)
		if err != nil {
			return nil, err
		}
		opts.Programs = append(opts.Programs, eval.Program{Path: p, Code: code})
	}
	opts.OnTruncated = truncatedWarning(path, stderr)
	return eval.Run(path, opts)
}

func writeEvalTable(w io.Writer, res []eval.Result) error {
	if len(res) > 0 {
		fmt.Fprintf(w, "full trace: %d producer packets\n", res[0].Packets)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "VARIANT\tSURVIVED\tIMPORTABLE\tSHARE\tSKIPPED\tUNRESOLVED\tRESTORES\tSTATE_B\tOK\tERROR\tABORT\tNS/PATCH\t")
	for _, r := range res {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f%%\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f\t\n", r.Variant, r.Survived, r.Importable, 100*r.Share,
			r.Skipped, r.Unresolved, r.RestorePackets, r.StateBytes, r.PatchOk, r.PatchError, r.PatchAbort, r.NsPerPatch)
	}
	return tw.Flush()
}

// evalMinBuffer is the smallest ring eval replays through: one 4 KiB
// chunk, which is also the page size TraceBuffer sizes round up to.
const evalMinBuffer = 4 << 10

// plotEval draws the importable share of the full trace and of the
// survivors, per variant, as SVG, or as PNG for a .png path (checkPlotPath).
func plotEval(res []eval.Result, path, trace string, size int64) error {
	var buf bytes.Buffer
	c := evalChart(res, trace, size)
	write := c.WriteSVG
	if strings.EqualFold(filepath.Ext(path), ".png") {
		write = c.WritePNG
	}
	if err := write(&buf); err != nil {
		return fmt.Errorf("--plot %s: %w", path, err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	return nil
}

// checkPlotPath refuses a --plot file name that is neither .svg nor .png
// (in any case) before the replay runs.
func checkPlotPath(path string) error {
	if ext := strings.ToLower(filepath.Ext(path)); path != "" && ext != ".svg" && ext != ".png" {
		return usageError{fmt.Errorf("--plot %q: want a file name ending in .svg or .png", path)}
	}
	return nil
}

// evalChart is plotEval's chart.
//
// Layout: each variant's label under its pair of bars on three lines
// (program, path, the two shares, so that a 0 % bar still reads), the
// group as wide as its longest line; the y axis runs to 120 %
// with ticks to 100 %, so that the legend has its own band above the bars;
// the title names the trace by its base name on a line of its own.
func evalChart(res []eval.Result, trace string, size int64) *barchart.Chart {
	c := &barchart.Chart{
		Title:  []string{"protovm eval: importable packets after a " + strconv.FormatInt(size>>10, 10) + " KiB ring", filepath.Base(trace)},
		YLabel: "importable (%)",
		YMax:   120,
		YTicks: []float64{0, 25, 50, 75, 100},
		Series: []barchart.Series{
			{Name: "share of the full trace", Fill: color.Gray{Y: 0}},
			{Name: "share of the ring's survivors", Fill: color.Gray{Y: 170}},
		},
	}
	for _, r := range res {
		full, surv := 100*r.Share, 100*r.SurvivorShare
		c.Series[0].Values = append(c.Series[0].Values, full)
		c.Series[1].Values = append(c.Series[1].Values, surv)
		c.Groups = append(c.Groups, strings.Replace(r.Variant, "/", "\n", 1)+fmt.Sprintf("\n%.1f %% / %.1f %%", full, surv))
	}
	return c
}
