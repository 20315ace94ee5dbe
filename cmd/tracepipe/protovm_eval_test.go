package main

import (
	"bytes"
	"encoding/xml"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"

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
	c := evalChart(res, "/some/long/directory/full.pftrace", 512<<10)
	l, err := c.Layout()
	if err != nil {
		t.Fatal(err)
	}
	if c.YMax <= 100 || l.Legend.Max.Y > l.Plot.Max.Y-l.Plot.Dy()*100/int(c.YMax) {
		t.Errorf("no band for the legend above the 100 %% bars: y max %v, legend %v in plot %v", c.YMax, l.Legend, l.Plot)
	}
	for _, tk := range c.YTicks {
		if tk > 100 {
			t.Errorf("a labelled tick above 100 %%: %v", tk)
		}
	}
	title := strings.Join(c.Title, "\n")
	if strings.Contains(title, "/some/long") || !strings.Contains(title, "full.pftrace") || !strings.Contains(title, "512 KiB") {
		t.Errorf("title %q", title)
	}
	// Each group holds its longest label line ("a_rather_long_program_name.yaml",
	// 31 characters of 7 pixels) with room to spare; the title fits the canvas.
	if min := 31 * 7; l.Group < min {
		t.Errorf("group width %v < the label's %v: labels overlap", l.Group, min)
	}
	if min := len(c.Title[0]) * 7; l.Width < min {
		t.Errorf("width %v < the title's %v", l.Width, min)
	}
	if l.Height < 3*72 {
		t.Errorf("height %v", l.Height)
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

// --plot writes a well-formed SVG or a PNG of the same size, whichever the
// extension says; the labels come from program file names and are escaped
// (a program named x<&">.yaml), and another extension is a usage error
// naming the flag before any replay.
func TestProtoVMEvalPlotFormats(t *testing.T) {
	path := writeFile(t, "full.pftrace", InterningTrace(500))
	prog, err := os.ReadFile("../../configs/protovm/interned_names.yaml")
	if err != nil {
		t.Fatal(err)
	}
	odd := writeFile(t, `x<&">.yaml`, prog)
	dir := t.TempDir()
	eval := func(plot string) (string, int) {
		_, stderr, code := runCLI(t, "protovm", "eval", "--trace", path, "--buffer", "16KiB", "--program", odd, "--plot", filepath.Join(dir, plot))
		return stderr, code
	}
	if stderr, code := eval("eval.svg"); code != exitOK {
		t.Fatalf("svg: exit %d: %s", code, stderr)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "eval.svg"))
	if err != nil {
		t.Fatal(err)
	}
	width, height, texts := 0, 0, ""
	d := xml.NewDecoder(bytes.NewReader(svg))
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, svg)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			for _, a := range tok.Attr {
				if tok.Name.Local == "svg" && a.Name.Local == "width" {
					width, _ = strconv.Atoi(a.Value)
				}
				if tok.Name.Local == "svg" && a.Name.Local == "height" {
					height, _ = strconv.Atoi(a.Value)
				}
			}
		case xml.CharData:
			texts += string(tok) + "\n"
		}
	}
	for _, want := range []string{"\nbaseline\n", "\n" + `x<&">.yaml` + "\n", "\nrestore\n", "\nfull.pftrace\n", "16 KiB ring"} {
		if !strings.Contains(texts, want) {
			t.Errorf("SVG texts lack %q:\n%s", want, texts)
		}
	}
	if stderr, code := eval("eval.PNG"); code != exitOK {
		t.Fatalf("png: exit %d: %s", code, stderr)
	}
	f, err := os.Open(filepath.Join(dir, "eval.PNG"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("png: %v", err)
	}
	if b := img.Bounds(); b.Dx() != width || b.Dy() != height || width < 300 || height < 3*72 {
		t.Errorf("png %v, svg %d×%d", b, width, height)
	}
	stderr, code := eval("eval.pdf")
	if code != exitUsage || !strings.Contains(stderr, "--plot") || !strings.Contains(stderr, ".svg or .png") {
		t.Errorf("--plot eval.pdf: exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "eval.pdf")); err == nil {
		t.Error("eval.pdf written")
	}
}
