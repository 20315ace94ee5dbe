package logdetail

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
)

// TestLogGroupsTheDetail: the message is formatted whole and the facts
// come as the group Key; below the logger's level, or with no logger,
// nothing is written (and nothing panics).
func TestLogGroupsTheDetail(t *testing.T) {
	var b bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&b, &slog.HandlerOptions{Level: slog.LevelInfo}))
	Log(l, slog.LevelInfo, []any{"sink", "s0", "n", 3}, "sink %s dropped %d", "s0", 3)
	var rec map[string]any
	if err := json.Unmarshal(b.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %s", err, b.String())
	}
	d, _ := rec[Key].(map[string]any)
	if rec["msg"] != "sink s0 dropped 3" || d["sink"] != "s0" || d["n"] != float64(3) {
		t.Errorf("logged %s", b.String())
	}
	b.Reset()
	Log(l, slog.LevelDebug, []any{"k", 1}, "hidden")
	Log(nil, slog.LevelError, []any{"k", 1}, "no logger")
	if b.Len() != 0 {
		t.Errorf("below the level: %s", b.String())
	}
}
