package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/pipeline"
	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/sinks"
)

// startPerfetto listens on Perfetto's producer socket (the perfetto:
// section) so that programs built for traced produce into this session,
// and waits, at most perfetto.wait_for_producers, until the data sources
// the config names and nothing else serves are registered. The caller
// closes the host when the session ended.
func startPerfetto(ctx context.Context, cfg *pipeline.Config, log *slog.Logger) (*pipeline.PerfettoProducers, *perfettoipc.Host, error) {
	reg := pipeline.NewPerfettoProducers()
	host := perfettoipc.NewHost(perfettoipc.NewProducerPort(reg))
	host.MaxConns, host.MaxConnsPerUID = cfg.Perfetto.MaxConnections, cfg.Perfetto.MaxConnectionsPerUID
	host.InitTimeout = cfg.Perfetto.InitTimeout
	host.Logf = func(format string, args ...any) {
		sinks.Logf(log, slog.LevelInfo, "perfetto: "+format, args...)
	}
	path := cfg.Perfetto.ProducerSocketPath()
	if err := host.Listen(path); err != nil {
		return nil, nil, err
	}
	var names []string
	for _, ds := range cfg.DataSources {
		if _, builtin := plugins.Lookup(ds.Name); !builtin && ds.Plugin == "" {
			names = append(names, ds.Name)
		}
	}
	sinks.LogDetail(log, slog.LevelInfo, []any{"producer_socket", path}, "perfetto: producers connect to %s (PERFETTO_PRODUCER_SOCK_NAME)", path)
	if len(names) > 0 {
		wctx, cancel := context.WithTimeout(ctx, cfg.Perfetto.Wait())
		missing := reg.WaitFor(wctx, names)
		cancel()
		if len(missing) > 0 {
			host.Close()
			return nil, nil, fmt.Errorf("perfetto: no producer registered %s within %v (perfetto.wait_for_producers)",
				strings.Join(missing, ", "), cfg.Perfetto.Wait())
		}
	}
	for _, d := range reg.DataSources() {
		sinks.LogDetail(log, slog.LevelInfo, []any{"data_source", d.Name, "producer", d.Producer, "pid", d.PID, "uid", d.UID},
			"perfetto: %s from %q (pid %d, uid %d)", d.Name, d.Producer, d.PID, d.UID)
	}
	return reg, host, nil
}
