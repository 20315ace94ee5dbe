package sdk

import (
	"os"

	"github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"

	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/plugins/internal/wire"
)

// Serve serves the given data sources (name → factory) to the host that
// started this process and exits when the host ends the connection. It
// never returns. Run by hand (not by a tracepipe host) it prints an
// explanation and exits with status 1.
//
// Log output of the plugin should go to os.Stderr before Serve is called
// (the standard log package does); the host forwards it.
func Serve(factories map[string]plugins.Factory) {
	fs := make(map[string]plugins.Factory, len(factories))
	for name, f := range factories {
		if f != nil {
			fs[name] = f
		}
	}
	logger := hclog.New(&hclog.LoggerOptions{
		Name:   "tracepipe-plugin",
		Output: os.Stderr, // the real stderr: go-plugin redirects os.Stderr later
		Level:  hclog.Warn,
	})
	srv := newServer(fs, logger)
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
