package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/sinks"
)

// Text lines keep the CLI's look after their time; JSON lines are slog
// records carrying the message's facts under "detail", which text lines
// leave out.
func TestNewLogger(t *testing.T) {
	var text bytes.Buffer
	l, err := newLogger(&text, logFormatText, "")
	if err != nil {
		t.Fatal(err)
	}
	l.Warn("sink disk: EIO")
	l.Info("serve: accepting relay senders on :7010", "sessions", 2)
	sinks.LogDetail(l, slog.LevelWarn, []any{"sink", "disk"}, "sink %s: full", "disk")
	ts := `\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} [-+]\d{4} `
	want := regexp.MustCompile(`^` + ts + `tracepipe: warning: sink disk: EIO\n` +
		ts + `tracepipe: serve: accepting relay senders on :7010 sessions=2\n` +
		ts + `tracepipe: warning: sink disk: full\n$`)
	if !want.MatchString(text.String()) {
		t.Errorf("text:\n%q\nwant\n%s", text.String(), want)
	}

	var js bytes.Buffer
	if l, err = newLogger(&js, logFormatJSON, "\r"); err != nil {
		t.Fatal(err)
	}
	sinks.LogDetail(l, slog.LevelWarn, []any{"sink", "disk", "error", "EIO"}, "sink %s: %s", "disk", "EIO")
	var rec struct {
		Level, Msg string
		Time       time.Time
		Detail     map[string]any
	}
	if err := json.Unmarshal(js.Bytes(), &rec); err != nil || rec.Level != "WARN" || rec.Msg != "sink disk: EIO" ||
		rec.Time.IsZero() || rec.Detail["sink"] != "disk" || rec.Detail["error"] != "EIO" {
		t.Errorf("json %q: %+v, %v", js.String(), rec, err)
	}

	if _, err := newLogger(&js, "xml", ""); err == nil || !strings.Contains(err.Error(), `--log-format "xml": want text or json`) {
		t.Errorf("bad format: %v", err)
	}
	if _, stderr, code := runCLI(t, "run", "--log-format", "xml"); code != exitUsage || !strings.Contains(stderr, "--log-format") {
		t.Errorf("run --log-format xml: exit %d, %s", code, stderr)
	}
}

// `serve --log-format json` writes its lines as JSON records.
func TestServeLogFormatJSON(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr testsupport.LockedBuffer
	ready := make(chan string, 1)
	done := make(chan error, 1)
	f := serveFlags{listen: "127.0.0.1:0", out: t.TempDir(), logFormat: logFormatJSON}
	go func() { done <- serve(ctx, f, &stderr, func(a string) { ready <- a }) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not start listening")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	found := false
	for _, line := range lines {
		var rec struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("not a JSON record: %q", line)
			continue
		}
		found = found || rec.Level == "INFO" && strings.HasPrefix(rec.Msg, "serve: accepting relay senders on 127.0.0.1:")
	}
	if !found {
		t.Errorf("no accepting record in:\n%s", stderr.String())
	}
}
