package config

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/tracepipe/tracepipe/plugins"
)

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

// CheckFixedMemory refuses a session whose buffers and SMBs add up to more
// than limit (0: the machine's RAM; negative: no bound), before anything
// is mapped: such a session would be killed by the kernel, hours in,
// once its rings filled.
func CheckFixedMemory(c *Config, limit int64, what string) error {
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

func builtinSource(name string) bool {
	_, ok := plugins.Lookup(name)
	return ok
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
