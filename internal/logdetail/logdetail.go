// Package logdetail logs a message that is complete as text with its
// facts repeated as an attribute group (Key), for collectors reading JSON
// logs; a text handler that leaves the group out loses nothing. It is the
// leaf that sinks (sinks.LogDetail) and control (the Alertmanager webhook)
// share so that both write the same group; it owns no logger, no handler
// and no formatting beyond fmt.Sprintf of the message.
package logdetail

import (
	"context"
	"fmt"
	"log/slog"
)

// Key names the attribute group that repeats a log message's facts as
// fields ("sink", "error", ...).
const Key = "detail"

// Log logs fmt.Sprintf(format, args...) at level on l with detail (slog's
// key-value list) as the group Key; a nil l, or one not enabled at level,
// discards it without formatting.
func Log(l *slog.Logger, level slog.Level, detail []any, format string, args ...any) {
	if l == nil || !l.Enabled(context.Background(), level) {
		return
	}
	l.Log(context.Background(), level, fmt.Sprintf(format, args...), slog.Group(Key, detail...))
}
