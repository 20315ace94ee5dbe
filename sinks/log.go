package sinks

import (
	"context"
	"fmt"
	"log/slog"
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
