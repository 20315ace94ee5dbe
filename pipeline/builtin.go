package pipeline

// The built-in data sources (linux.process_stats, linux.sys_stats,
// tracepipe.synthetic) register themselves in plugins' registry.
import _ "github.com/tracepipe/tracepipe/plugins/builtin"
