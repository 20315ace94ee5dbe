package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/pipeline"
)

// importWarning returns the line run's summary ends with when the session's
// counters predict that Perfetto's trace_processor will skip packets of its
// output (pipeline.Result.ImportRisks), or "". Before this line, a trace
// of 20,462 producer packets that imported none was summed up as "data
// loss". The line names `tracepipe check`, which tells exactly what
// imports.
func importWarning(res *pipeline.Result, cfg *config.Config) string {
	why := res.ImportRisks(cfg)
	if len(why) == 0 || len(res.Files) == 0 {
		return ""
	}
	return fmt.Sprintf("tracepipe: warning: Perfetto may skip many packets of this trace (%s); see what imports: tracepipe check %s",
		strings.Join(why, "; "), strings.Join(res.Files, " "))
}

// printDiscarded is the summary of a session whose output was removed
// (no trigger acted): what each sink had written, and that it is gone.
func printDiscarded(w io.Writer, res *pipeline.Result) {
	for _, sr := range res.Sinks {
		if len(sr.Files) == 0 {
			fmt.Fprintf(w, "tracepipe: %s: %d packets (%s) sent to %s before the trigger timeout\n", sr.Name, sr.Stats.PacketsWritten, byteSize(sr.Stats.BytesWritten), sr.Destination)
			continue
		}
		fmt.Fprintf(w, "tracepipe: %s: no trace kept: no trigger acted, so %s (%d service packets, %s) was removed\n",
			sr.Name, strings.Join(sr.Files, ", "), sr.Stats.PacketsWritten, byteSize(sr.Stats.BytesWritten))
	}
}
