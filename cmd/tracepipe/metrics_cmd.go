package main

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/tracepipe/tracepipe/metrics"
	"github.com/tracepipe/tracepipe/pipeline"
)

// serveSessionMetrics serves `run --metrics-addr`.
func serveSessionMetrics(addr string, svc *pipeline.Service, stderr io.Writer, log *slog.Logger) (func(), error) {
	shutdown, bound, err := metrics.ServeWith(addr, map[string]http.Handler{"/alertmanager": alertHandler(svc, log)}, metrics.Session(svc))
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "tracepipe: metrics on http://%s/metrics\n", bound)
	return shutdown, nil
}
