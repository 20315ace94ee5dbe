package main

import (
	"fmt"
	"io"

	"github.com/tracepipe/tracepipe/metrics"
	"github.com/tracepipe/tracepipe/pipeline"
)

// serveSessionMetrics serves `run --metrics-addr`: /metrics only (the
// Alertmanager webhook fires triggers, so it listens only where
// --alert-addr asks).
func serveSessionMetrics(addr string, svc *pipeline.Service, stderr io.Writer) (func(), error) {
	shutdown, bound, err := metrics.Serve(addr, metrics.Session(svc))
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "tracepipe: metrics on http://%s/metrics\n", bound)
	return shutdown, nil
}
