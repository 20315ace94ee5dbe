package pipeline

import (
	"github.com/tracepipe/tracepipe/buffer"
	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/transport/goplugin"
)

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
func newPluginProducer(spec producerSpec, ps pluginSpec, client buffer.ClientIdentity,
	commits chan<- commitMsg, notes chan<- note, finished <-chan struct{}) (*producer, error) {
	var p *producer
	lineRate, byteRate := ps.limits.StderrRates()
	t, s, err := goplugin.New(goplugin.Config{
		Index: spec.index, Name: spec.name, Path: ps.path, Label: spec.label(),
		DataSourceConfig: ps.config, SMBSize: ps.smbSize, PageSize: ps.pageSize,
		TargetBuffer: bufferID(spec.target), Policy: spec.policy,
		Limits: goplugin.HostLimits(ps.limits), StderrLineRate: lineRate, StderrByteRate: byteRate,
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
