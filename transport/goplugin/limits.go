package goplugin

import (
	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/plugins/host"
)

// HostLimits is what the plugin host enforces of l.
func HostLimits(l *config.PluginLimits) host.Limits {
	if l == nil {
		return host.Limits{}
	}
	return host.Limits{Memory: l.Memory, CPU: l.CPU}
}
