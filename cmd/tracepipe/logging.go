package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/tracepipe/tracepipe/sinks"
)

// Log formats of --log-format.
const (
	logFormatText = "text" // "<time> tracepipe: warning: <message>" lines, for a person
	logFormatJSON = "json" // one slog JSON record per line, for a log collector
)

// logTimeLayout is the time on text log lines: local time to the
// millisecond, with the zone, so that lines of a long `serve` can be
// matched with other logs.
const logTimeLayout = "2006-01-02 15:04:05.000 -0700"

// addLogFormatFlag adds --log-format to a command that logs while it runs.
func addLogFormatFlag(c *cobra.Command, format *string) {
	c.Flags().StringVar(format, "log-format", logFormatText, "how log lines are written to stderr: text (time, then the message) or json (one JSON record per line, with the message's facts as fields under \"detail\")")
}

// newLogger returns the logger of run and serve. Text lines keep the CLI's
// look after the time: "tracepipe: " then "warning: " for a warning, the
// message, then any attributes as key=value, except the sinks.DetailKey
// group, which repeats the message's facts for JSON readers. linePrefix
// goes before each line (none today: run's status line is cleared by its
// console writer, syncWriter). JSON writes slog's JSON records, every
// attribute included.
func newLogger(w io.Writer, format, linePrefix string) (*slog.Logger, error) {
	switch format {
	case logFormatText, "":
		return slog.New(&lineHandler{w: w, prefix: linePrefix, mu: new(sync.Mutex)}), nil
	case logFormatJSON:
		return slog.New(slog.NewJSONHandler(w, nil)), nil
	}
	return nil, usageError{fmt.Errorf("--log-format %q: want text or json", format)}
}

// lineHandler writes one line per record: prefix, the time, "tracepipe: ",
// the level for warnings and errors, the message, then any attributes as
// key=value (the detail group aside).
type lineHandler struct {
	w      io.Writer
	prefix string
	attrs  []slog.Attr
	mu     *sync.Mutex // shared by the handlers derived with WithAttrs
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var sb strings.Builder
	sb.WriteString(h.prefix)
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	sb.WriteString(t.Format(logTimeLayout) + " tracepipe: ")
	switch {
	case r.Level >= slog.LevelError:
		sb.WriteString("error: ")
	case r.Level >= slog.LevelWarn:
		sb.WriteString("warning: ")
	}
	sb.WriteString(r.Message)
	add := func(a slog.Attr) bool {
		if a.Key != sinks.DetailKey {
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

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(h.attrs[:len(h.attrs):len(h.attrs)], as...)
	return &c
}

func (h *lineHandler) WithGroup(string) slog.Handler { return h }
