package pipeline

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/tracefile"
)

// readmeBlocks returns the fenced code blocks of lang in the section titled
// title of the plugin guide (docs/plugins.md, once the README's), in order.
func readmeBlocks(t *testing.T, title, lang string) []string {
	t.Helper()
	readme, err := os.ReadFile("../docs/plugins.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(readme)
	i := strings.Index(s, "\n## "+title+"\n")
	if i < 0 {
		t.Fatalf("docs/plugins.md has no section %q", title)
	}
	s = s[i+1:]
	if j := strings.Index(s[3:], "\n## "); j >= 0 {
		s = s[:j+3]
	}
	var out []string
	for _, m := range regexp.MustCompile("(?s)\n```"+lang+"\n(.*?)\n```\n").FindAllStringSubmatch(s, -1) {
		out = append(out, m[1]+"\n")
	}
	return out
}

// requireBlocks returns the require directives of the go.mod text mod, as
// `go get github.com/tracepipe/tracepipe` copies them into a user's module
// (a go 1.17+ module lists every module its packages need, so the pruned
// module graph a user's build loads is the one tracepipe's build loads).
func requireBlocks(mod string) string {
	var b strings.Builder
	in := false
	for _, line := range strings.Split(mod, "\n") {
		trim := strings.TrimSpace(line)
		switch {
		case trim == "require (":
			in = true
			b.WriteString("require (\n")
		case in && trim == ")":
			in = false
			b.WriteString(")\n\n")
		case in:
			b.WriteString(line + "\n")
		case strings.HasPrefix(trim, "require "):
			b.WriteString(trim + "\n\n")
		}
	}
	return b.String()
}

// A plugin written from the README alone: its Go code and config, taken
// from the section as they are, build in a fresh module (the tracepipe
// module replaced by this worktree) and record slices and a counter.
func TestREADMEPluginBuildsAndRuns(t *testing.T) {
	goSrc := readmeBlocks(t, "Writing a data-source plugin", "go")
	yamls := readmeBlocks(t, "Writing a data-source plugin", "yaml")
	if len(goSrc) < 1 || len(yamls) != 1 {
		t.Fatalf("the section has %d go and %d yaml blocks, want the plugin (then snippets) and its config", len(goSrc), len(yamls))
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"main.go":     goSrc[0],
		"ticker.yaml": yamls[0],
		"go.sum":      string(sum),
		"go.mod": "module example.com/my-plugin\n\ngo 1.26\n\nrequire github.com/tracepipe/tracepipe v0.0.0\n\n" +
			requireBlocks(string(mod)) +
			"replace github.com/tracepipe/tracepipe => " + root + "\n",
	}
	// Later go blocks are snippets: each must compile as the body of a
	// function given the writer w and the value freeBytes.
	for i, snip := range goSrc[1:] {
		files[fmt.Sprintf("snippet%d.go", i)] = fmt.Sprintf("package main\n\nimport (\n\t\"github.com/tracepipe/tracepipe/plugins\"\n\t\"github.com/tracepipe/tracepipe/plugins/trackevent\"\n)\n\n"+
			"var _ = trackevent.Now\n\nfunc readmeSnippet%d(w plugins.PacketWriter, freeBytes uint64) error {\n%s\treturn err\n}\n", i, snip)
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	build := exec.Command(goBin, "build", "-o", "my-plugin", ".")
	build.Dir = dir
	// Resolve modules as a user's build does: through the user's GOPROXY,
	// filling in go.sum lines the fresh module needs. With an empty module
	// cache that downloads (this used GOPROXY=off, which failed on a fresh
	// machine: hclog's unpruned go.mod needs go-spew's go.mod).
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the README's plugin: %v\n%s", err, out)
	}

	out := filepath.Join(dir, "out.pftrace")
	cfg, err := config.Load(config.LoadOptions{Path: filepath.Join(dir, "ticker.yaml"), Output: out, Sets: []string{"duration=1s"}})
	if err != nil {
		t.Fatal(err)
	}
	res := runSession(t, cfg)
	var slices, counters, track int
	for _, p := range tracetest.ReadTrace(t, out) {
		if p.Info.SequenceID < 2 {
			continue
		}
		if ev, ok := bytesField(p.Raw, tracefile.FieldTrackEvent); ok {
			switch {
			case bytes.HasPrefix(ev, []byte{9 << 3, 1}):
				slices++
			case bytes.HasPrefix(ev, []byte{9 << 3, 4}):
				counters++
			}
		}
		if d, ok := bytesField(p.Raw, tracefile.FieldTrackDescriptor); ok && bytes.Contains(d, []byte("ticker")) {
			track++
		}
	}
	t.Logf("%d slices, %d counter values, %d ticker descriptors; invalid packets %d", slices, counters, track, res.Stats.InvalidPackets)
	if slices < 20 || counters != slices || track != 1 || res.Stats.InvalidPackets != 0 {
		t.Fatalf("the README plugin recorded %d slices, %d counter values, %d ticker track descriptors", slices, counters, track)
	}
}
