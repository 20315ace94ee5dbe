package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/spf13/cobra"
)

// Log formats of --log-format.
const (
	logFormatText = "text" // "tracepipe: warning: <message>" lines, for a person
	logFormatJSON = "json" // one slog JSON record per line, for a log collector
)

// addLogFormatFlag adds --log-format to a command that logs while it runs.
func addLogFormatFlag(c *cobra.Command, format *string) {
	c.Flags().StringVar(format, "log-format", logFormatText, "how log lines are written to stderr: text or json (one JSON record per line)")
}

// newLogger returns the logger of run and serve. Text lines keep the CLI's
// look, "tracepipe: " then "warning: " for a warning; linePrefix goes
// before each (run uses it to clear its progress line on a terminal).
// JSON writes slog's JSON records.
func newLogger(w io.Writer, format, linePrefix string) (*slog.Logger, error) {
	switch format {
	case logFormatText, "":
		return slog.New(&lineHandler{w: w, prefix: linePrefix, mu: new(sync.Mutex)}), nil
	case logFormatJSON:
		return slog.New(slog.NewJSONHandler(w, nil)), nil
	}
	return nil, usageError{fmt.Errorf("--log-format %q: want text or json", format)}
}

// lineHandler writes one line per record: prefix, "tracepipe: ", the
// level for warnings and errors, the message, then any attributes as
// key=value.
type lineHandler struct {
	w      io.Writer
	prefix string
	attrs  []slog.Attr
	mu     *sync.Mutex // shared by the handlers derived with WithAttrs
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var sb strings.Builder
	sb.WriteString(h.prefix + "tracepipe: ")
	switch {
	case r.Level >= slog.LevelError:
		sb.WriteString("error: ")
	case r.Level >= slog.LevelWarn:
		sb.WriteString("warning: ")
	}
	sb.WriteString(r.Message)
	add := func(a slog.Attr) bool { sb.WriteString(" " + a.String()); return true }
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
