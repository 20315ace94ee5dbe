package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/plugins"
)

// failingStart is a data source whose Start fails.
type failingStart struct{}

func (failingStart) Start(plugins.Host) error { return errors.New("no such device") }
func (failingStart) Flush() error             { return nil }
func (failingStart) Stop() error              { return nil }
func (failingStart) ClearIncrementalState()   {}

func init() {
	plugins.Register("test.docs_failstart", func(map[string]any) (plugins.DataSource, error) { return failingStart{}, nil })
}

// JSON logs carried only msg: a data source's failure now comes with its
// facts as fields (detail: data_source, index, error).
func TestLogDetailOfFailedStart(t *testing.T) {
	out := filepath.Join(t.TempDir(), "t.pftrace")
	cfg := cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 300ms
buffers: [{size_kb: 1024}]
data_sources:
  - name: test.scripted
  - name: test.docs_failstart
sinks: [{type: file, path: %q}]
`, out))
	var logs testsupport.LockedBuffer
	s, err := New(cfg, Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct {
			Msg    string
			Detail map[string]any
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		if rec.Detail["data_source"] == "test.docs_failstart" && rec.Detail["index"] == float64(1) &&
			rec.Detail["error"] == "data_sources[1] (test.docs_failstart): no such device" {
			found = true
		}
	}
	if !found {
		t.Errorf("no record with the failed source's facts:\n%s", logs.String())
	}
}
