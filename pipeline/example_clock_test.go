package pipeline

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"

	_ "github.com/tracepipe/tracepipe/plugins/builtin"
	"github.com/tracepipe/tracepipe/tracefile"
)

// configs/two_buffers.yaml uses deterministic timestamps; its events must
// still sit on the session's clock (within the session, after the clock
// snapshot taken at start), not in the first milliseconds after boot while
// the metadata says thousands of seconds.
func TestTwoBuffersEventsOnSessionClock(t *testing.T) {
	dir := t.TempDir()
	events := filepath.Join(dir, "events.pftrace")
	cfg, err := config.Load(config.LoadOptions{Path: filepath.Join("..", "configs", "two_buffers.yaml"), Sets: []string{
		"duration=500ms", "buffers[0].size_kb=4096", "sinks[0].path=" + events, "sinks[1].path=" + filepath.Join(dir, "proc.pftrace"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Options{Logger: testsupport.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.Run(ctx); err != nil { // filtered sinks do not list their files: read the path
		t.Fatal(err)
	}
	var start uint64
	n := 0
	for _, p := range tracetest.ReadTrace(t, events) {
		switch {
		case p.Info.PayloadField == tracefile.FieldClockSnapshot:
			start = p.Info.Timestamp
		case p.Info.PayloadField == tracefile.FieldTrackEvent:
			n++
			if start == 0 {
				t.Fatal("track event before the clock snapshot")
			}
			if ts := p.Info.Timestamp; ts+uint64(time.Second) < start || ts > start+uint64(time.Minute) {
				t.Fatalf("event at %d ns of boot time, session started at %d", ts, start)
			}
		}
	}
	if n == 0 {
		t.Fatal("no track event")
	}
}
