// Package logline owns the look of tracepipe's text log lines, shared by
// every program that logs while it runs (`tracepipe run`, `serve`, and
// tracepiped): "<time> tracepipe: [warning: |error: ]<message> key=value…".
// It must stay free of tracepipe's other packages, so that the smallest
// program can use it.
package logline

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// TimeLayout is the time on a line: local time to the millisecond, with
// the zone, so that the lines of a long run can be matched with other
// logs.
const TimeLayout = "2006-01-02 15:04:05.000 -0700"

// NewHandler returns a handler that writes one line per record to w, at
// level Info and above: prefix, the time, "tracepipe: ", the level for
// warnings and errors, the message, then the attributes as key=value,
// except the group named skip (facts repeated for JSON readers, such as
// sinks.DetailKey). Writes are serialized, also between the handlers
// derived with WithAttrs.
func NewHandler(w io.Writer, prefix, skip string) slog.Handler {
	return &handler{w: w, prefix: prefix, skip: skip, mu: new(sync.Mutex)}
}

type handler struct {
	w      io.Writer
	prefix string
	skip   string
	attrs  []slog.Attr
	mu     *sync.Mutex // shared by the handlers derived with WithAttrs
}

func (h *handler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *handler) Handle(_ context.Context, r slog.Record) error {
	var sb strings.Builder
	sb.WriteString(h.prefix)
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	sb.WriteString(t.Format(TimeLayout) + " tracepipe: ")
	switch {
	case r.Level >= slog.LevelError:
		sb.WriteString("error: ")
	case r.Level >= slog.LevelWarn:
		sb.WriteString("warning: ")
	}
	sb.WriteString(r.Message)
	add := func(a slog.Attr) bool {
		if a.Key != h.skip {
			sb.WriteString(" " + a.String())
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	sb.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, sb.String())
	return err
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(h.attrs[:len(h.attrs):len(h.attrs)], as...)
	return &c
}

func (h *handler) WithGroup(string) slog.Handler { return h }

// Locked returns a writer that passes each Write to w whole, one at a
// time: lines written from several goroutines (connections log from
// their own) do not interleave.
func Locked(w io.Writer) io.Writer { return &locked{w: w} }

type locked struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *locked) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
