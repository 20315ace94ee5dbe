package sdk

import (
	"os"

	"github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"

	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/plugins/internal/wire"
)

// Source is one data source a plugin serves, with what `tracepipe plugins`
// shows of it.
type Source struct {
	// Name is what data_sources[i].name selects.
	Name        string
	Description string
	ConfigKeys  []ConfigKey
	// Factory builds an instance from data_sources[i].config. It is also
	// called, and the instance discarded, to validate a config
	// (`tracepipe validate`): it must not start anything. Report problems
	// one per line as "key: message" so they are shown as
	// data_sources[i].config.key.
	Factory plugins.Factory
}

// ConfigKey documents one key of a data source's config section.
type ConfigKey struct {
	Name        string
	Type        string // "integer", "string", "duration", ...
	Description string
	Default     string
}

// Serve serves the given data sources (name → factory) to the host that
// started this process and exits when the host ends the connection. It
// never returns. Run by hand (not by a tracepipe host) it prints an
// explanation and exits with status 1. ServeSources also describes them.
//
// Log output of the plugin should go to os.Stderr before Serve is called
// (the standard log package does); the host forwards it.
func Serve(factories map[string]plugins.Factory) {
	var sources []Source
	for name, f := range factories {
		sources = append(sources, Source{Name: name, Factory: f})
	}
	ServeSources(sources...)
}

// ServeSources is Serve with descriptions and config keys for discovery.
func ServeSources(sources ...Source) {
	srcs := make(map[string]Source, len(sources))
	for _, s := range sources {
		if s.Factory != nil {
			srcs[s.Name] = s
		}
	}
	logger := hclog.New(&hclog.LoggerOptions{
		Name:   "tracepipe-plugin",
		Output: os.Stderr, // the real stderr: go-plugin redirects os.Stderr later
		Level:  hclog.Warn,
	})
	srv := newServer(srcs, logger)
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: wire.Handshake,
		Plugins:         plugin.PluginSet{wire.PluginName: &wire.Plugin{Impl: srv}},
		GRPCServer:      plugin.DefaultGRPCServer,
		Logger:          logger,
	})
	// plugin.Serve returns when the host shut the server down (or on a
	// serving error it already logged). Stop whatever is still running.
	srv.abandon()
	os.Exit(0)
}
