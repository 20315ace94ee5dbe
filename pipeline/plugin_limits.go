package pipeline

import (
	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/plugins/host"
)

// stderrBurstSeconds is the burst of the stderr rate limits, in seconds
// of their rate.
const stderrBurstSeconds = 10

// hostLimits is what the plugin host enforces of l.
func hostLimits(l *config.PluginLimits) host.Limits {
	if l == nil {
		return host.Limits{}
	}
	return host.Limits{Memory: l.Memory, CPU: l.CPU}
}
