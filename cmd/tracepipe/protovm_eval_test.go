package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"gonum.org/v1/plot/vg"

	. "github.com/tracepipe/tracepipe/internal/tracebuild"
	"github.com/tracepipe/tracepipe/protovm/eval"
)

// The command prints the table, --json and --plot write their outputs.
func TestProtoVMEvalCmd(t *testing.T) {
	path := writeFile(t, "full.pftrace.gz", gzipped(t, InterningTrace(3000)))
	plot := filepath.Join(t.TempDir(), "eval.svg")
	stdout, stderr, code := runCLI(t, "protovm", "eval", "--trace", path, "--buffer", "64KiB",
		"--program", "../../configs/protovm/interned_names.yaml", "--plot", plot)
	if code != exitOK || !strings.Contains(stdout, "interned_names.yaml/restore") || !strings.Contains(stdout, "baseline") {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	svg, err := os.ReadFile(plot)
	if err != nil || !bytes.Contains(svg, []byte("<svg")) {
		t.Fatalf("plot: %v", err)
	}
	stdout, _, code = runCLI(t, "protovm", "eval", "--trace", path, "--buffer", "64KiB", "--json")
	if code != exitOK || !strings.Contains(stdout, `"variant": "baseline"`) {
		t.Fatalf("--json: exit %d\n%s", code, stdout)
	}
	if _, _, code = runCLI(t, "protovm", "eval", "--trace", path, "--buffer", "lots"); code != exitUsage {
		t.Fatalf("bad --buffer: exit %d", code)
	}
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// The chart had overlapping x labels, a clipped legend and title, and the
// legend over the 100 % bar: the legend now has a band above 100 %, each
// variant's group is as wide as its label lines, the title names the trace
// by its base name and fits the canvas.
func TestEvalPlotLayout(t *testing.T) {
	res := []eval.Result{
		{Variant: "baseline", Share: 0.001, SurvivorShare: 0.001},
		{Variant: "a_rather_long_program_name.yaml/restore", Share: 0.15, SurvivorShare: 1},
		{Variant: "a_rather_long_program_name.yaml/protovms", Share: 0, SurvivorShare: 0},
	}
	p, width, height, err := evalPlot(res, "/some/long/directory/full.pftrace", 512<<10)
	if err != nil {
		t.Fatal(err)
	}
	if p.Y.Max <= 100 || !p.Legend.Top {
		t.Errorf("no band for the legend above the 100 %% bars: y max %v, legend top %v", p.Y.Max, p.Legend.Top)
	}
	for _, tk := range p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max) {
		if tk.Value > 100 && tk.Label != "" {
			t.Errorf("a labelled tick above 100 %%: %+v", tk)
		}
	}
	if strings.Contains(p.Title.Text, "/some/long") || !strings.Contains(p.Title.Text, "full.pftrace") || !strings.Contains(p.Title.Text, "512 KiB") {
		t.Errorf("title %q", p.Title.Text)
	}
	// Each group holds its longest label line ("a_rather_long_program_name.yaml",
	// 31 characters) with room to spare, at the tick font's size.
	perGroup := (width - vg.Points(90)) / vg.Length(len(res))
	if min := vg.Length(31*0.5) * p.X.Tick.Label.Font.Size; perGroup < min {
		t.Errorf("group width %v < the label's %v: labels overlap", perGroup, min)
	}
	if height < 3*vg.Inch {
		t.Errorf("height %v", height)
	}
	// Renders as SVG and PNG.
	for _, ext := range []string{"svg", "png"} {
		path := filepath.Join(t.TempDir(), "eval."+ext)
		if err := plotEval(res, path, "full.pftrace", 512<<10); err != nil {
			t.Fatalf("%s: %v", ext, err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
			t.Fatalf("%s: %v", ext, err)
		}
	}
}

// A --buffer out of range is a usage error naming the flag and the range,
// without a Go "<nil>" in it; one above the ring's 4 GiB limit too, and
// one below a chunk (a 1-byte ring used to become 4 KiB without a word).
func TestProtoVMEvalBufferRange(t *testing.T) {
	path := writeFile(t, "full.pftrace", InterningTrace(10))
	for _, size := range []string{"0", "1", "4095", "5GiB"} {
		_, stderr, code := runCLI(t, "protovm", "eval", "--trace", path, "--buffer", size)
		if code != exitUsage || !strings.Contains(stderr, "--buffer") || strings.Contains(stderr, "<nil>") {
			t.Errorf("--buffer %s: exit %d, stderr %q", size, code, stderr)
		}
	}
	// A size between whole pages runs, with a note of the size replayed.
	_, stderr, code := runCLI(t, "protovm", "eval", "--trace", path, "--buffer", "6000")
	if code != 0 || !strings.Contains(stderr, "rounded up") || !strings.Contains(stderr, "8192 bytes") {
		t.Errorf("--buffer 6000: exit %d, stderr %q", code, stderr)
	}
}
