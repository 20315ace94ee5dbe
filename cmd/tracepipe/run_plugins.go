package main

import (
	"fmt"
	"io"

	"github.com/tracepipe/tracepipe/pipeline"
)

// printPluginFaults adds to run's summary what became of the data sources
// whose producer died while recording (a plugin that crashed or broke its
// limits: "died: memory limit 256 MiB exceeded: ...") and of the plugin
// stderr lines over their rate limit, which the log only counted.
func printPluginFaults(w io.Writer, res *pipeline.Result) {
	tp := res.Stats.Tracepipe
	if tp == nil {
		return
	}
	for _, p := range tp.Producers {
		if p.Died > 0 && p.Error != "" {
			fmt.Fprintf(w, "tracepipe: data_sources[%d] (%s) died: %s\n", p.Index, p.Source, p.Error)
		}
		if p.StderrLinesSuppressed > 0 {
			fmt.Fprintf(w, "tracepipe: data_sources[%d] (%s): %d plugin stderr lines suppressed (over limits.stderr_lines_per_second / stderr_bytes_per_second)\n", p.Index, p.Source, p.StderrLinesSuppressed)
		}
	}
}
