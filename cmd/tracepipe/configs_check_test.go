package main

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/tpimport"
	"github.com/tracepipe/tracepipe/tracefile"
)

// Finding codes of `tracepipe check` (tpimport) used below.
const (
	findSkipped        = "packet_skipped_seq_needs_incremental_state_invalid"
	findSeqsDropped    = "traced_buf_incremental_sequences_dropped"
	findNoFlush        = "config_write_into_file_no_flush"
	findNoSnapshot     = tpimport.CodeNoClockSnapshot
	findReplaced       = tpimport.CodeReplacedPayload
	findOutsideSession = tpimport.CodeTimestampsOutside
)

// TestExampleConfigsCheck runs every example config of configs/ (durations
// shortened) and checks each output file with tpimport. It asserts the
// EXACT set of finding codes each file has today; every entry names the
// defect that causes it, so that when a fix lands the entry goes and the
// list shrinks to empty (issue 13: "check clean on the output of every
// example config").
func TestExampleConfigsCheck(t *testing.T) {
	type output struct {
		// name is the sink file; rotated files are sinks.FileName's
		name string
		// first is what the (first) file must show. rest, for rotated
		// sets, gives what each later file must show, from the file's
		// shape (read with tracefile, not tpimport): which findings a
		// rotated file raises depends on what landed in it (the last one
		// may hold only a few packets).
		first []string
		rest  func(s *tracefile.Summary) []string
	}
	covered := map[string]bool{}
	for _, tc := range []struct {
		config  string
		set     []string
		outputs []output
		// premise checks what the run must have done for the case to mean
		// anything (e.g. the ring wrapped).
		premise func(t *testing.T, dir string)
	}{
		{
			config: "default.yaml",
			set:    []string{"duration=1s", "sinks[0].path={dir}/default.pftrace"},
			// Clean since flush_period defaults to file_write_period in
			// streaming mode (was config_write_into_file_no_flush).
			outputs: []output{{name: "default.pftrace", first: []string{}}},
		},
		{
			// The ProtoVM example without overwrites: issue 13 "0 slices".
			config: "ring_buffer.yaml",
			set:    []string{"duration=1s", "data_sources[0].config.rate=1000", "sinks[0].path={dir}/ring.pftrace.gz"},
			// Clean since the program serves the restore path (no protovms
			// packet; was protovm_replaced_payload: TP replaced every
			// slice-begin carrying interned_data by the VM state).
			outputs: []output{{name: "ring.pftrace.gz", first: []string{}}},
		},
		{
			// The ring wrapped several times (1 MiB ring, ~10 MB/s for
			// 1.5 s, no clear inside the run: clear_period is 2 s).
			config: "ring_buffer.yaml",
			set:    []string{"duration=1500ms", "buffers[0].size_kb=1024", "data_sources[0].config.rate=5000", "sinks[0].path={dir}/wrap.pftrace.gz"},
			// Clean since each wrapped sequence gets a restore packet ahead
			// of its first survivor (was packet_skipped_..._invalid and
			// traced_buf_incremental_sequences_dropped).
			outputs: []output{{name: "wrap.pftrace.gz", first: []string{}}},
			premise: func(t *testing.T, dir string) {
				ts := lastTraceStats(t, filepath.Join(dir, "wrap.pftrace.gz"))
				if len(ts.BufferStats) == 0 || ts.BufferStats[0].WriteWrapCount < 3 {
					t.Fatalf("the ring did not wrap 3 times: %+v", ts.BufferStats)
				}
				// The process tree dumped at start survives the wraps: it
				// has a buffer of its own (it shared the ring, and was
				// the first thing overwritten).
				if n := summarize(t, filepath.Join(dir, "wrap.pftrace.gz")).Kinds["process_tree"]; n == 0 {
					t.Errorf("the wrapped ring's trace has no process_tree packet")
				}
			},
		},
		{
			// The flight recorder read at stop (its periodic trigger
			// fires after 30 s: no snapshot in 1 s).
			config:  "flight_recorder.yaml",
			set:     []string{"duration=1s", "unique_session_name=", "data_sources[0].config.rate=2000", "sinks[0].path={dir}/flight.pftrace"},
			outputs: []output{{name: "flight.pftrace", first: []string{}}},
		},
		{
			config: "two_buffers.yaml",
			set:    []string{"duration=1s", "sinks[0].path={dir}/events.pftrace", "sinks[1].path={dir}/processes.pftrace"},
			outputs: []output{
				// Clean since deterministic timestamps start at the
				// source's boot time of creation (was
				// timestamps_outside_session: events at 1 ms of boot time).
				{name: "events.pftrace", first: []string{}},
				// Clean since service packets pass every sink filter (the
				// process_tree-only filter dropped the clock snapshot).
				{name: "processes.pftrace", first: []string{}},
			},
		},
		{
			// Rotation: 1 MiB files (the smallest max_file_size), each
			// self-contained: clean since a rotated file starts with the
			// service packets and a restore packet per sequence (was
			// missing_clock_snapshot, packet_skipped_..._invalid and
			// traced_buf_incremental_sequences_dropped in every file after
			// the first). 5 s: at the full rate that is ~5 files; a
			// loaded machine that runs the source at 40 % still rotates.
			config: "long_streaming.yaml",
			set:    []string{"duration=5s", "data_sources[2].config.rate=25000", "sinks[0].path={dir}/long.pftrace.zst", "sinks[0].max_file_size=1MiB"},
			outputs: []output{{name: "long.pftrace.zst",
				first: []string{},
				rest:  func(*tracefile.Summary) []string { return []string{} },
			}},
		},
	} {
		covered[tc.config] = true
		t.Run(strings.TrimSuffix(tc.config, ".yaml")+"/"+tc.outputs[0].name, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"run", "-c", filepath.Join("..", "..", "configs", tc.config)}
			for _, s := range tc.set {
				args = append(args, "--set", strings.ReplaceAll(s, "{dir}", dir))
			}
			_, stderr, code := runCLI(t, args...)
			if code != exitOK {
				t.Fatalf("run: exit %d\n%s", code, stderr)
			}
			// Outputs check finds clean draw no import warning from run.
			if strings.Contains(stderr, "Perfetto may skip") {
				t.Errorf("run warns about a trace check finds clean:\n%s", stderr)
			}
			if tc.premise != nil {
				tc.premise(t, dir)
			}
			for _, o := range tc.outputs {
				files := rotatedFiles(t, dir, o.name)
				if o.rest != nil && len(files) < 2 {
					t.Fatalf("%s: %d file(s), want ≥ 2 (rotation)", o.name, len(files))
				}
				if o.rest == nil && len(files) != 1 {
					t.Fatalf("%s: %d files, want 1", o.name, len(files))
				}
				for i, f := range files {
					want := o.first
					if i > 0 {
						want = o.rest(summarize(t, f))
					}
					r, err := tpimport.CheckFile(f, tpimport.Options{})
					if err != nil {
						t.Fatal(err)
					}
					got := r.Codes()
					if got == nil {
						got = []string{}
					}
					w := slices.Clone(want)
					sort.Strings(w)
					if !slices.Equal(got, w) {
						var sb strings.Builder
						_ = r.WriteText(&sb)
						t.Errorf("%s: findings %q, want %q\n%s", filepath.Base(f), got, w, sb.String())
					}
				}
			}
		})
	}
	// Every example config is run and checked.
	examples, err := filepath.Glob(filepath.Join("..", "..", "configs", "*.yaml"))
	if err != nil || len(examples) == 0 {
		t.Fatalf("no example configs: %v", err)
	}
	for _, e := range examples {
		if !covered[filepath.Base(e)] {
			t.Errorf("configs/%s is not checked here", filepath.Base(e))
		}
	}
}

// rotatedFiles returns name and its rotated files (sinks.FileName), as
// they exist in dir.
func rotatedFiles(t *testing.T, dir, name string) []string {
	t.Helper()
	var out []string
	for i := 0; ; i++ {
		p := sinks.FileName(filepath.Join(dir, name), i)
		if _, err := os.Stat(p); err != nil {
			break
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		entries, _ := os.ReadDir(dir)
		t.Fatalf("no %s in %s (%v)", name, dir, entries)
	}
	return out
}

func summarize(t *testing.T, path string) *tracefile.Summary {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := tracefile.Summarize(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return s
}

func lastTraceStats(t *testing.T, path string) tracefile.TraceStats {
	t.Helper()
	s := summarize(t, path)
	if s.LastTraceStats == nil {
		t.Fatalf("%s: no trace_stats", path)
	}
	return *s.LastTraceStats
}
