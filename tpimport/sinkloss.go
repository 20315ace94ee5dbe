package tpimport

import (
	"fmt"

	"github.com/tracepipe/tracepipe/tracefile"
)

// CodeSinkPacketsDropped: the sink that wrote the trace says it lost
// packets (sink_packets_dropped of its TraceStats: a full queue, a write
// error, a full disk it may have resumed from, sinks/file's resume.go).
// trace_processor has no stat for it (a tracepipe counter), but those
// packets are not in the trace. The counter is cumulative: the last
// TraceStats stands.
const CodeSinkPacketsDropped = "sink_packets_dropped"

// sinkSection records the sink counters of a TraceStats.
func (c *Checker) sinkSection(tp *tracefile.TracepipeStats, machine uint32) {
	key := findingKey{CodeSinkPacketsDropped, seqKey{machine, 0}, -1}
	if tp.SinkPacketsDropped == 0 {
		delete(c.findings, key)
		return
	}
	msg := fmt.Sprintf("the sink that wrote this trace lost %d packet(s) (sink_packets_dropped", tp.SinkPacketsDropped)
	if tp.SinkReconnects > 0 {
		msg += fmt.Sprintf("; its destination was away and came back %d time(s)", tp.SinkReconnects)
	}
	c.findings[key] = &Finding{
		Code: CodeSinkPacketsDropped, Severity: SeverityCheck, Machine: machine, Index: -1,
		Count: int64(tp.SinkPacketsDropped), Offset: -1, Message: msg + "): they are not in the trace",
	}
}
