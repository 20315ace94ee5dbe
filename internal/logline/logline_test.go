package logline

import (
	"bytes"
	"log/slog"
	"regexp"
	"testing"
)

// One line per record at Info and above: the time, "tracepipe: ", the
// level for warnings and errors, the message, then the attributes, the
// skipped group aside.
func TestHandlerLines(t *testing.T) {
	var b bytes.Buffer
	l := slog.New(NewHandler(&b, "> ", "detail")).With("session", "s1")
	l.Debug("not shown")
	l.Info("started", "buffers", 2)
	l.Warn("slow sink", slog.Group("detail", "path", "/x"), "lag", "2s")
	l.Error("gone")
	re := regexp.MustCompile(`^> \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} [-+]\d{4} tracepipe: (.*)$`)
	var got []string
	for _, line := range bytes.Split(bytes.TrimSuffix(b.Bytes(), []byte("\n")), []byte("\n")) {
		m := re.FindSubmatch(line)
		if m == nil {
			t.Fatalf("line %q does not have the layout", line)
		}
		got = append(got, string(m[1]))
	}
	want := []string{"started session=s1 buffers=2", "warning: slow sink session=s1 lag=2s", "error: gone session=s1"}
	if len(got) != len(want) {
		t.Fatalf("lines %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %q, want %q", i, got[i], want[i])
		}
	}
}
