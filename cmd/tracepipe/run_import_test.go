package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/tpimport"
)

// TestRunWarnsWhenTheTraceImportsPoorly: a ring overwriting an unthrottled
// synthetic source without a ProtoVM program imports almost nothing
// (check's verdict, asserted as the premise); run's summary says so and
// names `tracepipe check` with the file.
func TestRunWarnsWhenTheTraceImportsPoorly(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "ring.pftrace")
	cfg := writeFile(t, "ring.yaml", []byte(`duration: 1s
write_into_file: false
buffers:
  - size_kb: 1024
data_sources:
  - name: tracepipe.synthetic
    buffer_exhausted_policy: stall
    config: {rate: 20000}
sinks:
  - type: file
    path: `+out+"\n"))
	_, stderr, code := runCLI(t, "run", cfg)
	if code != exitOK {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	r, err := tpimport.CheckFile(out, tpimport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Clean() {
		t.Fatalf("premise: the wrapped ring's trace is check-clean; the warning would be wrong\n%s", stderr)
	}
	want := "tracepipe: warning: Perfetto may skip many packets of this trace (buffers[0] overwrote "
	if !strings.Contains(stderr, want) || !strings.Contains(stderr, "holding tracepipe.synthetic, which has no ProtoVM program") ||
		!strings.Contains(stderr, "see what imports: tracepipe check "+out+"\n") {
		t.Errorf("run's summary does not warn and name tracepipe check:\n%s", stderr)
	}
}

// TestTriggerTimeoutSummaryNamesNoRemovedFile: a start_tracing session
// that no trigger reached removes its file, and its summary never claims
// to have written it.
func TestTriggerTimeoutSummaryNamesNoRemovedFile(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "st.pftrace")
	cfg := writeFile(t, "st.yaml", []byte(`duration: 10s
buffers:
  - size_kb: 1024
data_sources:
  - name: tracepipe.synthetic
    config: {rate: 100}
trigger_config:
  trigger_mode: start_tracing
  trigger_timeout: 200ms
  triggers:
    - {name: go, stop_delay: 1s}
sinks:
  - type: file
    path: `+out+"\n"))
	_, stderr, code := runCLI(t, "run", cfg)
	if code != exitNoTrigger {
		t.Fatalf("run: exit %d, want %d\n%s", code, exitNoTrigger, stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("%s still exists (%v)", out, err)
	}
	if strings.Contains(stderr, "wrote") || !strings.Contains(stderr, "no trace kept: no trigger acted, so "+out+" (") {
		t.Errorf("the summary reports the removed file as written:\n%s", stderr)
	}
}

// TestExamplePluginTraceIsClean: the example counter plugin's trace is
// clean under check (its packets were stamped 1..N ns, far outside the
// session: timestamps_outside_session).
func TestExamplePluginTraceIsClean(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "counter.pftrace")
	cfg := writeFile(t, "counter.yaml", []byte(`duration: 10s
buffers:
  - size_kb: 1024
data_sources:
  - name: example.counter
    plugin: `+examplePlugin(t)+`
    config: {packets: 200}
sinks:
  - type: file
    path: `+out+"\n"))
	if _, stderr, code := runCLI(t, "run", cfg); code != exitOK {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	r, err := tpimport.CheckFile(out, tpimport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Clean() {
		var sb strings.Builder
		_ = r.WriteText(&sb)
		t.Fatalf("findings %q\n%s", r.Codes(), sb.String())
	}
	if s := summarize(t, out); s.Kinds["for_testing"] != 200 {
		t.Fatalf("%d counter packets, want 200", s.Kinds["for_testing"])
	}
}

// The output's name and compression never disagree: -o x.pftrace with a
// config that compresses with zstd is refused with the names to use (it
// wrote zstd into x.pftrace); -o x.pftrace.zst, or compression none, work.
func TestOutputNameAndCompressionAgree(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, "zstd.yaml", []byte(`duration: 200ms
write_into_file: true
file_write_period: 100ms
buffers: [{size_kb: 1024}]
data_sources: [{name: tracepipe.synthetic, config: {rate: 100}}]
sinks: [{type: file, path: t.pftrace.zst, compression: zstd}]
`))
	plain := filepath.Join(dir, "x.pftrace")
	_, stderr, code := runCLI(t, "run", cfg, "-o", plain)
	if code == exitOK || !strings.Contains(stderr, `sinks[0].compression: "zstd", but the name "x.pftrace" says uncompressed: name it x.pftrace.zst, or set compression to none`) {
		t.Fatalf("-o x.pftrace with zstd: exit %d\n%s", code, stderr)
	}
	if _, err := os.Stat(plain); !os.IsNotExist(err) {
		t.Fatalf("%s was written (%v)", plain, err)
	}
	if _, stderr, code := runCLI(t, "run", cfg, "-o", plain, "--set", "sinks[0].compression=none"); code != exitOK {
		t.Fatalf("compression none: exit %d\n%s", code, stderr)
	}
	if b, err := os.ReadFile(plain); err != nil || len(b) < 4 || string(b[:4]) == "\x28\xb5\x2f\xfd" {
		t.Fatalf("%s: %v, zstd magic %v", plain, err, err == nil && len(b) >= 4 && string(b[:4]) == "\x28\xb5\x2f\xfd")
	}
	zst := filepath.Join(dir, "x.pftrace.zst")
	if _, stderr, code := runCLI(t, "run", cfg, "-o", zst); code != exitOK {
		t.Fatalf("-o x.pftrace.zst: exit %d\n%s", code, stderr)
	}
	if b, err := os.ReadFile(zst); err != nil || len(b) < 4 || string(b[:4]) != "\x28\xb5\x2f\xfd" {
		t.Fatalf("%s is not zstd: %v", zst, err)
	}
}
