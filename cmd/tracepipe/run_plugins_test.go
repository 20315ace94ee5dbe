package main

import (
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/pipeline"
	"github.com/tracepipe/tracepipe/tracefile"
)

// The summary names each plugin that died, with why, and the stderr lines
// it counted instead of logging; a healthy producer adds nothing.
func TestPrintPluginFaults(t *testing.T) {
	res := &pipeline.Result{Stats: tracefile.TraceStats{Tracepipe: &tracefile.TracepipeStats{Producers: []tracefile.ProducerStats{
		{Index: 0, Source: "/p/alloc", Died: 1, Error: "memory limit 256 MiB exceeded: exited with status 2"},
		{Index: 1, Source: "/p/noisy", StderrLinesSuppressed: 93000},
		{Index: 2, Source: "/p/spoof", InvalidPackets: 3},
	}}}}
	var b strings.Builder
	printPluginFaults(&b, res)
	want := "tracepipe: data_sources[0] (/p/alloc) died: memory limit 256 MiB exceeded: exited with status 2\n" +
		"tracepipe: data_sources[1] (/p/noisy): 93000 plugin stderr lines suppressed (over limits.stderr_lines_per_second / stderr_bytes_per_second)\n"
	if b.String() != want {
		t.Errorf("summary:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	printPluginFaults(&b, &pipeline.Result{})
	if b.Len() != 0 {
		t.Errorf("no trace stats: printed %q", b.String())
	}
}
