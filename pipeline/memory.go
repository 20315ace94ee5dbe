package pipeline

import (
	"fmt"
)

// The session's large fixed allocations live outside the Go heap: the
// buffers (buffer.New maps them), plugin and Perfetto SMBs (shared
// memory) and snapshot clones (flightrec.CloneMem). What stays on the heap is
// bounded by the configuration: the SMBs of in-process data sources
// (smb.NewHeapSMB: a lagging in-process writer must never fault on an
// unmapped SMB), the output batches on their way to the sinks, ProtoVM
// states, and the session's bookkeeping. HeapBudget adds these up so that
// the CLI can give the Go runtime a soft memory limit: without one, the
// collector lets the heap grow to twice its live size, and the process
// holds that much more than it needs for as long as it runs.

const (
	// heapBase is what a session needs on the heap besides its batches
	// and ProtoVM states: goroutine stacks, commit queues, the sinks'
	// writers, the config, gRPC and CEL state.
	heapBase = 8 << 20
	// protoVMSequences is how many sequences per ProtoVM data source the
	// budget counts at their full memory limit.
	protoVMSequences = 4
	// networkSinkHeap is what a relay or NATS sink holds unacknowledged:
	// its outbox (sinks/remote: 64 batches of 256 KiB by default), twice.
	networkSinkHeap = 32 << 20
)

// HeapBudget returns the Go heap the session should fit in: a soft limit
// for debug.SetMemoryLimit. Going over it costs collector CPU (the
// runtime caps that at about half the CPU), never a failure.
func (s *Service) HeapBudget() int64 {
	batches := int64(s.free.capacity()) * readBatchTarget
	n := int64(heapBase) + batches + batches/4 // a batch overshoots its target by up to one packet
	for _, p := range s.producers {
		if p.smb != nil && p.smb.Fd() < 0 { // heap-backed: live for the whole session
			n += int64(p.smb.Size())
		}
	}
	for _, sc := range s.cfg.Sinks {
		if sc.Type != "file" {
			n += networkSinkHeap
		}
	}
	for i := range s.cfg.DataSources {
		if pc := s.cfg.DataSources[i].ProtoVM; pc != nil {
			n += protoVMSequences * int64(pc.MemoryLimitKB) * 1024
		}
	}
	return n
}

// mib formats a byte count for a message.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
