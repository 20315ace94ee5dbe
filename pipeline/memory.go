package pipeline

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/tracepipe/tracepipe/plugins"
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

// FixedMemory is what a session built from c maps for its fixed
// allocations before any data flows: its buffers, and the shared memory
// buffers of the data sources it runs itself (built-in sources on the
// heap, plugins in a memfd). A Perfetto producer's SMB is the producer's
// own and is not counted. Every page of both may be touched once data
// flows, so this is what the session can come to hold.
func (c *Config) FixedMemory() (buffers, smbs int64) {
	for _, b := range c.Buffers {
		buffers += int64(b.SizeKB) << 10
	}
	for _, ds := range c.DataSources {
		switch {
		case ds.Plugin != "":
			smbs += int64(c.Producers.PluginSMBSizeKB) << 10
		case builtinSource(ds.Name):
			smbs += int64(c.Producers.SMBSizeKB) << 10
		}
	}
	return buffers, smbs
}

// PhysicalMemory is the machine's RAM in bytes (0 when it cannot be read):
// the default bound on what one session may map (Options.MaxMemory).
func PhysicalMemory() int64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}

// checkFixedMemory refuses a session whose buffers and SMBs add up to more
// than limit (0: the machine's RAM; negative: no bound), before anything
// is mapped: such a session would be killed by the kernel, hours in,
// once its rings filled.
func checkFixedMemory(c *Config, limit int64, what string) error {
	if limit == 0 {
		limit = PhysicalMemory()
		what = "this machine's RAM; run --max-memory"
	}
	if limit <= 0 {
		return nil
	}
	buffers, smbs := c.FixedMemory()
	if buffers+smbs <= limit {
		return nil
	}
	return fmt.Errorf("buffers: the session needs %s (buffers %s, data sources' shared memory buffers %s), more than %s (%s); lower buffers[].size_kb or raise the bound",
		mib(buffers+smbs), mib(buffers), mib(smbs), mib(limit), what)
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func builtinSource(name string) bool {
	_, ok := plugins.Lookup(name)
	return ok
}
