package sinks

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/tracepipe/tracepipe/internal/logdetail"
)

// Logf logs one formatted message at level on l; a nil l discards it. The
// sinks and their readers log through it so that a nil Logger needs no
// check at each call site.
func Logf(l *slog.Logger, level slog.Level, format string, args ...any) {
	if l == nil || !l.Enabled(context.Background(), level) {
		return
	}
	l.Log(context.Background(), level, fmt.Sprintf(format, args...))
}

// DetailKey names the attribute group that repeats a log message's facts
// as fields ("sink", "error", ...) for log collectors reading JSON logs.
// The message itself stays complete: text handlers leave the group out.
const DetailKey = logdetail.Key

// LogDetail is Logf with the message's facts attached as the group
// DetailKey (detail is slog's key-value list: "sink", name, "error", err).
func LogDetail(l *slog.Logger, level slog.Level, detail []any, format string, args ...any) {
	logdetail.Log(l, level, detail, format, args...)
}
