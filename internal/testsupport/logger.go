package testsupport

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Logger returns a slog.Logger whose records go to t.Log, one line each
// ("LEVEL msg key=value..."), so that a failing test shows what the code
// under test logged.
func Logger(t testing.TB) *slog.Logger { return slog.New(&tHandler{t: t}) }

type tHandler struct {
	t     testing.TB
	attrs []slog.Attr
}

func (h *tHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *tHandler) Handle(_ context.Context, r slog.Record) error {
	var sb strings.Builder
	sb.WriteString(r.Level.String() + " " + r.Message)
	add := func(a slog.Attr) bool { sb.WriteString(" " + a.String()); return true }
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	h.t.Helper()
	h.t.Log(sb.String())
	return nil
}

func (h *tHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &tHandler{t: h.t, attrs: append(h.attrs[:len(h.attrs):len(h.attrs)], as...)}
}

func (h *tHandler) WithGroup(string) slog.Handler { return h }

// Messages is a slog.Handler that keeps the message of every record, for
// tests that check what was logged.
type Messages struct {
	mu   sync.Mutex
	msgs []string
}

func (m *Messages) Enabled(context.Context, slog.Level) bool { return true }
func (m *Messages) Handle(_ context.Context, r slog.Record) error {
	m.mu.Lock()
	m.msgs = append(m.msgs, r.Message)
	m.mu.Unlock()
	return nil
}
func (m *Messages) WithAttrs([]slog.Attr) slog.Handler { return m }
func (m *Messages) WithGroup(string) slog.Handler      { return m }

// All returns the messages logged so far.
func (m *Messages) All() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.msgs...)
}
