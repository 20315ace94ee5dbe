package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every metric name.
const Namespace = "tracepipe"

// Sample is one value a collector reports.
type Sample struct {
	Name   string // without the namespace
	Help   string
	Kind   prometheus.ValueType
	Labels []string // name, value, name, value...
	Value  float64
}

// Func is a collector made of a function that lists samples at scrape
// time. It is "unchecked" (describes nothing up front), since the set of
// buffers, producers and sinks is known only at run time.
type Func func(emit func(Sample))

// Describe sends nothing: Func is an unchecked collector.
func (Func) Describe(chan<- *prometheus.Desc) {}

// Collect turns the samples into const metrics.
func (f Func) Collect(ch chan<- prometheus.Metric) {
	f(func(s Sample) {
		var names, values []string
		for i := 0; i+1 < len(s.Labels); i += 2 {
			names = append(names, s.Labels[i])
			values = append(values, s.Labels[i+1])
		}
		desc := prometheus.NewDesc(Namespace+"_"+s.Name, s.Help, names, nil)
		m, err := prometheus.NewConstMetric(desc, s.Kind, s.Value, values...)
		if err != nil {
			m = prometheus.NewInvalidMetric(desc, err)
		}
		ch <- m
	})
}

// Struct emits every uint64 field of v (a struct) as a counter named
// prefix + snake_case(field) + "_total", with labels.
func Struct(emit func(Sample), prefix, help string, v any, labels ...string) {
	rv := reflect.Indirect(reflect.ValueOf(v))
	if rv.Kind() != reflect.Struct {
		return
	}
	rt := rv.Type()
	for i := range rt.NumField() {
		f := rt.Field(i)
		if f.Type.Kind() != reflect.Uint64 || !f.IsExported() {
			continue
		}
		emit(Sample{
			Name: prefix + SnakeCase(f.Name) + "_total", Help: help + " (" + f.Name + ")",
			Kind: prometheus.CounterValue, Labels: labels, Value: float64(rv.Field(i).Uint()),
		})
	}
}

// SnakeCase turns a Go field name into a metric name part
// (BytesOverwritten → bytes_overwritten, SMBChunksRejected →
// smb_chunks_rejected).
func SnakeCase(s string) string {
	var b strings.Builder
	r := []rune(s)
	for i, c := range r {
		if unicode.IsUpper(c) {
			if i > 0 && (unicode.IsLower(r[i-1]) || i+1 < len(r) && unicode.IsLower(r[i+1]) && unicode.IsUpper(r[i-1])) {
				b.WriteByte('_')
			}
			c = unicode.ToLower(c)
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Handler serves the collectors (plus Go runtime and process metrics) in
// the Prometheus text format.
func Handler(cs ...prometheus.Collector) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, c := range cs {
		reg.MustRegister(c)
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Serve listens on addr and serves /metrics until the returned shutdown
// is called (it waits at most 2 s for scrapes in progress).
func Serve(addr string, cs ...prometheus.Collector) (shutdown func(), bound string, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("metrics: --metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", Handler(cs...))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the listener failed; nothing to report to
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, ln.Addr().String(), nil
}

// itoa formats a label value.
func itoa[T ~int | ~uint16 | ~uint64](v T) string { return strconv.FormatUint(uint64(v), 10) }
