package pipeline

import (
	"fmt"
)

// The session's large fixed allocations live outside the Go heap: the
// buffers (buffer.New maps them), the SMBs (in-process data sources'
// with smb.NewPrivateSMB, plugins' and Perfetto producers' in shared
// memory), snapshot clones (flightrec.CloneMem) and the bytes of the
// output batches (buffer.NewMem, fanout.go). What stays on the heap is
// bounded by the configuration: the batches' packet index (and bytes of a
// packet that overshoots a batch), ProtoVM states, and the session's
// bookkeeping. HeapBudget adds these up so that the CLI can give the Go
// runtime a soft memory limit: without one, the collector lets the heap
// grow to twice its live size, and the process holds that much more than
// it needs for as long as it runs.

const (
	// heapBase is what a session needs besides its batches and ProtoVM
	// states: goroutine stacks, commit queues, the sinks' writers, the
	// config, gRPC and CEL state, and the runtime's own memory, which
	// the soft limit counts too (GC metadata, profiling buckets: ~5 MiB).
	// serve --perfetto streaming at 1 KiB events holds 12 MiB in all with
	// a 2.7 MiB live heap; at 8 MiB the limit was below that, and the
	// collector ran back to back.
	heapBase = 16 << 20
	// protoVMSequences is how many sequences per ProtoVM data source the
	// budget counts at their full memory limit.
	protoVMSequences = 4
	// networkSinkHeap is what a relay or NATS sink holds unacknowledged:
	// its outbox (sinks/remote: 64 batches of 256 KiB by default), twice.
	networkSinkHeap = 32 << 20
	// batchIndexHeap is what the budget counts on the heap per output
	// batch (its bytes are mapped).
	batchIndexHeap = readBatchTarget / 2
)

// HeapBase is the part of HeapBudget every session counts whatever its
// configuration (heapBase): the rest follows from the configured sizes.
const HeapBase = heapBase

// HeapBudget returns the Go heap the session should fit in: a soft limit
// for debug.SetMemoryLimit. Going over it costs collector CPU (the
// runtime caps that at about half the CPU), never a failure.
func (s *Service) HeapBudget() int64 {
	// A batch's index (ends, Packets, Pass: 33 bytes a packet) is half
	// its target for packets of 66 bytes; smaller packets are rare
	// enough for the soft limit to absorb.
	n := int64(heapBase) + int64(s.free.capacity())*batchIndexHeap
	for _, p := range s.producers {
		if p.smb != nil && p.smb.OnHeap() { // live for the whole session
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
