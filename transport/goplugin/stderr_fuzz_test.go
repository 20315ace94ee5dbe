package goplugin

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// FuzzLineLogger feeds a plugin's stderr (untrusted bytes, cut into
// writes at arbitrary points) to the line logger: no line it logs is
// longer than maxStderrLine or holds a newline, what it logs is the input
// without its newlines, and with a rate limit every line is either logged
// or counted.
func FuzzLineLogger(f *testing.F) {
	f.Add([]byte("hello\nworld\n"), uint16(3))
	f.Add([]byte("no newline at the end"), uint16(0))
	f.Add(bytes.Repeat([]byte("x"), 10000), uint16(4097))
	f.Add([]byte("\n\n\npanic: boom\n\tgoroutine 1\n"), uint16(1))
	f.Add(append(bytes.Repeat([]byte("y"), 4096), '\n'), uint16(4096))
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		if bytes.Contains(data, []byte(" plugin-host")) {
			return // go-plugin's own lines are dropped on purpose
		}
		var logged []string
		l := &lineLogger{logf: func(format string, args ...any) { logged = append(logged, fmt.Sprintf(format, args...)) }}
		feed(l, data, int(cut))
		l.finish()
		for _, s := range logged {
			if len(s) > maxStderrLine || strings.Contains(s, "\n") {
				t.Fatalf("logged a line of %d bytes (newline: %v)", len(s), strings.Contains(s, "\n"))
			}
		}
		if got, want := strings.Join(logged, ""), string(bytes.ReplaceAll(data, []byte("\n"), nil)); got != want {
			t.Fatalf("logged %q, want %q", got, want)
		}
		_ = l.last()

		now := time.Unix(0, 0)
		limited := &lineLogger{prefix: "p: ", bucket: newStderrBucket(1, 1024, func() time.Time { now = now.Add(time.Millisecond); return now })}
		var kept int
		limited.logf = func(format string, args ...any) {
			if !strings.Contains(fmt.Sprintf(format, args...), " suppressed ") {
				kept++
			}
		}
		feed(limited, data, int(cut))
		limited.finish()
		if uint64(kept)+limited.suppressedLines() != uint64(len(logged)) {
			t.Fatalf("rate-limited: %d logged + %d suppressed, want %d lines", kept, limited.suppressedLines(), len(logged))
		}
	})
}

// feed writes data to w in pieces of cut bytes (all at once when 0).
func feed(w *lineLogger, data []byte, cut int) {
	if cut <= 0 {
		cut = len(data) + 1
	}
	for len(data) > 0 {
		n := min(cut, len(data))
		if k, _ := w.Write(data[:n]); k != n {
			panic(fmt.Sprintf("Write returned %d of %d", k, n))
		}
		data = data[n:]
	}
}
