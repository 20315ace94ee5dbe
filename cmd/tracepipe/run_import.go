package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/pipeline"
	"github.com/tracepipe/tracepipe/plugins/builtin"
)

// importWarning returns the line run's summary ends with when the session's
// counters predict that Perfetto's trace_processor will skip packets of its
// output, or "". Loss counters alone do not say that: a ring overwriting
// sys_stats is what a ring is for, while a producer that lost one packet
// (or a ring that overwrote a sequence's interned data with no ProtoVM
// program to restore it) makes trace_processor drop every later packet of
// that sequence until its next incremental-state clear, which a busy
// unthrottled source may never write: a trace of 20,462 producer packets
// imported none, and the summary said only "data loss". The line names
// `tracepipe check`, which tells exactly what imports.
func importWarning(res *pipeline.Result, cfg *config.Config) string {
	var why []string
	for i, b := range res.Stats.BufferStats {
		if b.ChunksOverwritten == 0 {
			continue
		}
		if names := statefulWithoutVM(cfg, i); len(names) > 0 {
			why = append(why, fmt.Sprintf("buffers[%d] overwrote %d chunk(s) holding %s, which has no ProtoVM program to restore the interned state its later packets need",
				i, b.ChunksOverwritten, strings.Join(names, ", ")))
		}
	}
	var writerLoss uint64
	for _, b := range res.Stats.BufferStats {
		writerLoss += b.TraceWriterPacketLoss
	}
	if writerLoss > 0 {
		why = append(why, fmt.Sprintf("%d packet(s) lost inside producers' writers", writerLoss))
	}
	if tp := res.Stats.Tracepipe; tp != nil {
		if tp.ProducerPacketsDropped > 0 {
			why = append(why, fmt.Sprintf("producers dropped %d packet(s) on a full shared memory buffer", tp.ProducerPacketsDropped))
		}
		if tp.ProtoVMPatchesFailed > 0 {
			why = append(why, fmt.Sprintf("%d ProtoVM patch(es) failed", tp.ProtoVMPatchesFailed))
		}
		if tp.SinkRestoreOverflows > 0 {
			why = append(why, fmt.Sprintf("%d rotated file(s) started without a sequence's state", tp.SinkRestoreOverflows))
		}
	}
	if len(why) == 0 || len(res.Files) == 0 {
		return ""
	}
	return fmt.Sprintf("tracepipe: warning: Perfetto may skip many packets of this trace (%s); see what imports: tracepipe check %s",
		strings.Join(why, "; "), strings.Join(res.Files, " "))
}

// statelessSources are the built-in data sources whose packets need no
// incremental state: a ring may overwrite them without making the rest
// of their sequence unreadable.
var statelessSources = []string{builtin.SysStatsName, builtin.ProcessStatsName}

// statefulWithoutVM names the data sources writing into buffer i that may
// intern data and have no ProtoVM program.
func statefulWithoutVM(cfg *config.Config, i int) []string {
	var out []string
	for _, ds := range cfg.DataSources {
		if ds.TargetBuffer == i && ds.ProtoVM == nil && !slices.Contains(statelessSources, ds.Name) && !slices.Contains(out, ds.Name) {
			out = append(out, ds.Name)
		}
	}
	return out
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
