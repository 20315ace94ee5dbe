package main

import (
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/tracepipe/tracepipe/config"
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
	c.Flags().StringVar(&plotPath, "plot", "", "write a bar chart of the importable shares to this file (.svg, or .png)")
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
// survivors, per variant, as SVG or PNG (by path's extension).
//
// Layout: each variant's label under its pair of bars on three lines
// (program, path, the two shares, so that a 0 % bar still reads), the
// group as wide as its longest line; the y axis runs to 120 %
// with ticks to 100 %, so that the legend has its own band above the bars;
// the title names the trace by its base name on a line of its own.
func plotEval(res []eval.Result, path, trace string, size int64) error {
	p, width, height, err := evalPlot(res, trace, size)
	if err != nil {
		return err
	}
	return p.Save(width, height, path)
}

// evalPlot builds plotEval's chart and its size.
func evalPlot(res []eval.Result, trace string, size int64) (p *plot.Plot, width, height vg.Length, err error) {
	p = plot.New()
	p.Title.Text = "protovm eval: importable packets after a " + strconv.FormatInt(size>>10, 10) + " KiB ring\n" + filepath.Base(trace)
	p.Title.Padding = vg.Points(6)
	p.Y.Label.Text = "importable (%)"
	p.Y.Min, p.Y.Max = 0, 120
	p.Y.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 0, Label: "0"}, {Value: 25, Label: "25"}, {Value: 50, Label: "50"},
		{Value: 75, Label: "75"}, {Value: 100, Label: "100"}})
	full, surv := make(plotter.Values, len(res)), make(plotter.Values, len(res))
	names := make([]string, len(res))
	longest := 0
	for i, r := range res {
		full[i], surv[i] = 100*r.Share, 100*r.SurvivorShare
		names[i] = strings.Replace(r.Variant, "/", "\n", 1) + fmt.Sprintf("\n%.1f %% / %.1f %%", full[i], surv[i])
		for _, line := range strings.Split(names[i], "\n") {
			longest = max(longest, len(line))
		}
	}
	w := vg.Points(18)
	a, err := plotter.NewBarChart(full, w)
	if err != nil {
		return nil, 0, 0, err
	}
	a.Offset = -w / 2
	a.Color = plotter.DefaultLineStyle.Color
	b, err := plotter.NewBarChart(surv, w)
	if err != nil {
		return nil, 0, 0, err
	}
	b.Offset = w / 2
	b.Color = color.Gray{Y: 170}
	p.Add(a, b)
	p.Legend.Add("share of the full trace", a)
	p.Legend.Add("share of the ring's survivors", b)
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(8)
	p.NominalX(names...)
	// A label line is about 0.55 em wide per character at the tick font.
	group := max(vg.Points(100), vg.Length(float64(longest)*0.58)*p.X.Tick.Label.Font.Size+vg.Points(12))
	width = vg.Points(90) + group*vg.Length(len(res))
	for _, line := range strings.Split(p.Title.Text, "\n") { // never clip the title
		width = max(width, vg.Length(float64(len(line))*0.58)*p.Title.TextStyle.Font.Size+vg.Points(40))
	}
	return p, width, 4.5 * vg.Inch, nil
}
