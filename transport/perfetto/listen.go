package perfetto

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/sinks"
)

// ListenForSession listens on Perfetto's producer socket for one session
// of cfg (its perfetto: section: the socket's path and its connection
// bounds), so that programs built for traced produce into it, and waits,
// at most perfetto.wait_for_producers or until ctx ends, until the data
// sources the config names and nothing else serves are registered; the
// error names those that were not. The Producers go into the session's
// pipeline.Options.Perfetto; the caller closes the host when the session
// ended. It logs on log (nil: not at all) where producers connect, the
// data sources they registered, and the optional ones that stayed
// missing.
func ListenForSession(ctx context.Context, cfg *config.Config, log *slog.Logger) (*Producers, *perfettoipc.Host, error) {
	reg := NewProducers()
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
	// Required: the names nothing else serves, and those whose entry
	// carries a perfetto_config (only a producer reads it). Optional: in a
	// Perfetto text config, the names a built-in also serves (as under
	// traced, the producer is what the config means; the built-in stands
	// in when none registers).
	var names, optional []string
	for _, ds := range cfg.DataSources {
		if ds.Plugin != "" {
			continue
		}
		_, builtin := plugins.Lookup(ds.Name)
		switch {
		case !builtin || ds.PerfettoConfig != nil:
			names = append(names, ds.Name)
		case cfg.FromPerfettoText():
			optional = append(optional, ds.Name)
		}
	}
	sinks.LogDetail(log, slog.LevelInfo, []any{"producer_socket", path}, "perfetto: producers connect to %s (%s)", path, producerSocketSource(cfg.Perfetto))
	if len(names)+len(optional) > 0 {
		wctx, cancel := context.WithTimeout(ctx, cfg.Perfetto.Wait())
		missing := reg.WaitFor(wctx, append(names, optional...))
		cancel()
		var required []string
		for _, m := range missing {
			if slices.Contains(names, m) {
				required = append(required, m)
			} else {
				sinks.Logf(log, slog.LevelWarn, "perfetto: no producer registered %s within %v (perfetto.wait_for_producers): tracepipe's built-in %s serves it", m, cfg.Perfetto.Wait(), m)
			}
		}
		if len(required) > 0 {
			host.Close()
			return nil, nil, fmt.Errorf("perfetto: no producer registered %s within %v (perfetto.wait_for_producers)",
				strings.Join(required, ", "), cfg.Perfetto.Wait())
		}
	}
	for _, d := range reg.DataSources() {
		sinks.LogDetail(log, slog.LevelInfo, []any{"data_source", d.Name, "producer", d.Producer, "pid", d.PID, "uid", d.UID},
			"perfetto: %s from %q (pid %d, uid %d)", d.Name, d.Producer, d.PID, d.UID)
	}
	return reg, host, nil
}

// producerSocketSource says where the producer socket's path came from,
// for the log line that names it (producers must be given the same path).
func producerSocketSource(c config.PerfettoConfig) string {
	switch {
	case c.ProducerSocket != "":
		return "perfetto.producer_socket; producers find it in PERFETTO_PRODUCER_SOCK_NAME"
	case os.Getenv("PERFETTO_PRODUCER_SOCK_NAME") != "":
		return "PERFETTO_PRODUCER_SOCK_NAME"
	default:
		return "Perfetto's default, as producers find it without PERFETTO_PRODUCER_SOCK_NAME"
	}
}
