package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/tracepipe/tracepipe/metrics"
	"github.com/tracepipe/tracepipe/perfettosvc"
)

// servePerfetto is `tracepipe serve --perfetto`: act as Perfetto's traced
// (perfettosvc.Serve; tracepiped is the same service alone, in a smaller
// program). With metricsAddr, /metrics reports each running session as
// run's does, labelled with its tracing session id.
func servePerfetto(ctx context.Context, stderr io.Writer, maxMemory int64, procs int, metricsAddr string) error {
	stderr = &syncWriter{w: stderr} // connections log from their own goroutines
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, "tracepipe: "+format+"\n", args...) }
	logger, err := newLogger(stderr, "text", "")
	if err != nil {
		return err
	}
	o := perfettosvc.ServeOptions{Logger: logger, Logf: logf, MaxMemory: maxMemory, Procs: procs}
	if metricsAddr != "" {
		o.Started = func(pc *perfettosvc.PerfettoConsumers) (func(), error) {
			shutdown, bound, err := metrics.Serve(metricsAddr, metrics.Sessions(func() []metrics.LabeledSession {
				var out []metrics.LabeledSession
				for _, rs := range pc.Running() {
					out = append(out, metrics.LabeledSession{ID: strconv.FormatUint(rs.ID, 10), Src: rs.Service})
				}
				return out
			}))
			if err != nil {
				return nil, err
			}
			logf("metrics on http://%s/metrics", bound)
			return shutdown, nil
		}
	}
	return perfettosvc.Serve(ctx, o)
}
