package pipeline

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/plugins/builtin"
)

// ImportRisks says why Perfetto's trace_processor may skip many packets
// of what the session wrote, one reason each, or nil when its counters
// predict no such thing. cfg is the config the session ran.
//
// Loss counters alone do not say that: a ring overwriting sys_stats is
// what a ring is for, while a producer that lost one packet (or a ring
// that overwrote a sequence's interned data with no ProtoVM program to
// restore it) makes trace_processor drop every later packet of that
// sequence until its next incremental-state clear, which a busy
// unthrottled source may never write: a trace of 20,462 producer packets
// imported none. The reasons are a prediction from counters; `tracepipe
// check` (package tpimport) reads the files and tells exactly what
// imports.
func (r *Result) ImportRisks(cfg *config.Config) []string {
	var why []string
	for i, b := range r.Stats.BufferStats {
		if b.ChunksOverwritten == 0 {
			continue
		}
		if names := statefulWithoutVM(cfg, i); len(names) > 0 {
			why = append(why, fmt.Sprintf("buffers[%d] overwrote %d chunk(s) holding %s, which has no ProtoVM program to restore the interned state its later packets need",
				i, b.ChunksOverwritten, strings.Join(names, ", ")))
		}
	}
	var writerLoss uint64
	for _, b := range r.Stats.BufferStats {
		writerLoss += b.TraceWriterPacketLoss
	}
	if writerLoss > 0 {
		why = append(why, fmt.Sprintf("%d packet(s) lost inside producers' writers", writerLoss))
	}
	if tp := r.Stats.Tracepipe; tp != nil {
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
	return why
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
