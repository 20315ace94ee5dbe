// Package metrics owns tracepipe's Prometheus exposition: collectors that
// turn a running session's Status (per buffer, per producer, per sink)
// and a receiver's counters into metrics, and the /metrics HTTP server
// behind `--metrics-addr`.
//
// Collectors only read snapshots the pipeline already publishes; they
// must never take a lock the pipeline's hot paths hold or change what
// they observe. Metric names are listed in the README (Metrics).
package metrics
