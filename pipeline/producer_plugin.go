package pipeline

import (
	"context"
	"time"

	"github.com/tracepipe/tracepipe/buffer"
	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/smb"
	"github.com/tracepipe/tracepipe/transport"
)

// PluginHost runs data sources in plugin executables (Options.Plugins;
// transport/goplugin's Host is tracepipe's). It is an interface so that a
// binary that serves no plugin data source, tracepiped, does not link
// go-plugin and gRPC.
type PluginHost interface {
	// ResolvePlugins gives every data source of cfg that names neither a
	// plugin nor an in-process data source the plugin in plugin_dir that
	// serves it, or returns a *config.ValidationError naming those none
	// serves.
	ResolvePlugins(ctx context.Context, cfg *config.Config) error
	// NewPlugin builds the Transport of the data source instance c
	// describes and the SMB it writes into (the session's to read and to
	// close). Nothing is started until the Transport's Start.
	NewPlugin(c transport.PluginConfig) (transport.Transport, *smb.SMB, error)
}

// testPluginHost is the PluginHost of sessions whose Options give none,
// in this package's tests only (TestMain sets it); nil otherwise.
var testPluginHost PluginHost

// pluginSpec is what a plugin producer needs beyond producerSpec.
type pluginSpec struct {
	path     string
	config   map[string]any
	limits   *config.PluginLimits
	smbSize  int
	pageSize int
	logf     func(string, ...any)
}

// newPluginProducer builds a producer whose data source runs in the
// plugin executable ps.path, over the go-plugin transport
// (transport/goplugin). Nothing is started until Run.
func newPluginProducer(host PluginHost, spec producerSpec, ps pluginSpec, client buffer.ClientIdentity,
	commits chan<- commitMsg, notes chan<- note, finished <-chan struct{}) (*producer, error) {
	var p *producer
	lineRate, byteRate := ps.limits.StderrRates()
	var memLimit int64
	var cpuLimit time.Duration
	if ps.limits != nil {
		memLimit, cpuLimit = ps.limits.Memory, ps.limits.CPU
	}
	t, s, err := host.NewPlugin(transport.PluginConfig{
		Index: spec.index, Name: spec.name, Path: ps.path, Label: spec.label(),
		DataSourceConfig: ps.config, SMBSize: ps.smbSize, PageSize: ps.pageSize,
		TargetBuffer: bufferID(spec.target), Policy: spec.policy,
		MemoryLimit: memLimit, CPULimit: cpuLimit, StderrLineRate: lineRate, StderrByteRate: byteRate,
		Logf:       ps.logf,
		OnTriggers: func(names []string) { p.onTriggers(names) },
	})
	if err != nil {
		return nil, err
	}
	p = newProducer(spec, s, client, commits, notes, finished)
	// After the plugin's Done no commit is delivered (goplugin.Plugin).
	p.quietWhenExited = true
	p.side = t
	return p, nil
}

// stderrSuppressor is a Transport that counts the stderr lines of its
// process it did not log (goplugin.Plugin).
type stderrSuppressor interface{ StderrLinesSuppressed() uint64 }
