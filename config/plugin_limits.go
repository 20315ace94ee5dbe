package config

import "time"

// PluginLimits bounds what one plugin data source's processes may take
// (data_sources[i].limits). The plugin and everything it starts end with
// the session whether or not limits are set (plugins/host); a plugin that
// breaks its memory or CPU limit dies, and that is the data source's
// failure (its restart policy applies; its error says "memory limit 256
// MiB exceeded"). Its stderr is logged line by line within a rate; the
// lines over it are counted (TraceStats producers[].stderr_lines_suppressed)
// and reported, not logged.
type PluginLimits struct {
	// Memory the plugin may allocate: a byte count or a size like
	// "256MiB" (0: no limit; else 16 MiB..1 TiB). cgroup v2 memory.max
	// where the memory controller is delegated to tracepipe's cgroup, else
	// RLIMIT_DATA (private writable memory: heap, anonymous mappings).
	Memory int64 `koanf:"memory"`
	// CPU time the plugin may use in total (0: no limit; else 1s..1000h,
	// whole seconds, rounded up): RLIMIT_CPU.
	CPU time.Duration `koanf:"cpu"`
	// StderrLinesPerSecond and StderrBytesPerSecond rate-limit the
	// plugin's stderr in the log (0: the defaults, 100 lines and 64 KiB
	// per second), each with a burst of ten seconds' worth.
	StderrLinesPerSecond uint32 `koanf:"stderr_lines_per_second"`
	StderrBytesPerSecond int64  `koanf:"stderr_bytes_per_second"`
}

// Defaults and bounds of data_sources[i].limits.
const (
	DefaultStderrLinesPerSecond = 100
	DefaultStderrBytesPerSecond = 64 << 10

	minPluginMemory = 16 << 20
	maxPluginMemory = 1 << 40
	maxPluginCPU    = 1000 * time.Hour
	maxStderrLines  = 1_000_000
	maxStderrBytes  = 1 << 30
)

// byteSizeKeys are the config keys (besides max_file_size) whose int64
// value may be written as a size with a unit.
var byteSizeKeys = map[string]bool{"memory": true, "stderr_bytes_per_second": true}

// checkPluginLimits checks data_sources[i].limits (path); inProcess says
// the data source runs inside tracepipe, where no limit can apply.
func checkPluginLimits(k *checker, path string, l *PluginLimits, inProcess bool) {
	if l == nil {
		return
	}
	if inProcess {
		k.bad(path, "limits apply to plugin data sources only (this one runs inside tracepipe)")
		return
	}
	if l.Memory != 0 && (l.Memory < minPluginMemory || l.Memory > maxPluginMemory) {
		k.bad(path+".memory", "must be 0 (no limit) or in 16MiB..1TiB, got %d bytes", l.Memory)
	}
	if l.CPU != 0 && (l.CPU < time.Second || l.CPU > maxPluginCPU) {
		k.bad(path+".cpu", "must be 0 (no limit) or in 1s..1000h, got %v", l.CPU)
	}
	if l.StderrLinesPerSecond > maxStderrLines {
		k.bad(path+".stderr_lines_per_second", "must be in 0..%d (0: %d), got %d", maxStderrLines, DefaultStderrLinesPerSecond, l.StderrLinesPerSecond)
	}
	if l.StderrBytesPerSecond != 0 && (l.StderrBytesPerSecond < 1024 || l.StderrBytesPerSecond > maxStderrBytes) {
		k.bad(path+".stderr_bytes_per_second", "must be 0 (%d) or in 1KiB..1GiB, got %d", DefaultStderrBytesPerSecond, l.StderrBytesPerSecond)
	}
}

// StderrRates returns the stderr rate limits of l, defaults applied.
func (l *PluginLimits) StderrRates() (lines, bytes float64) {
	lines, bytes = DefaultStderrLinesPerSecond, DefaultStderrBytesPerSecond
	if l != nil && l.StderrLinesPerSecond > 0 {
		lines = float64(l.StderrLinesPerSecond)
	}
	if l != nil && l.StderrBytesPerSecond > 0 {
		bytes = float64(l.StderrBytesPerSecond)
	}
	return lines, bytes
}
