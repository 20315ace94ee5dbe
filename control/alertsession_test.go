package control

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/tracepipe/tracepipe/internal/logdetail"
)

// fakeAlertSession acts on the triggers it knows and records what the
// webhook reports back.
type fakeAlertSession struct {
	mu       sync.Mutex
	known    []string
	producer []string
	refused  [][]string
	requests []int
}

func (f *fakeAlertSession) ActivateTriggers(producer string, names ...string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.producer = append(f.producer, producer)
	var acted []string
	for _, n := range names {
		for _, k := range f.known {
			if n == k {
				acted = append(acted, n)
			}
		}
	}
	return acted
}

func (f *fakeAlertSession) TriggersRefused(source string, names []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refused = append(f.refused, append([]string{source}, names...))
}

func (f *fakeAlertSession) AlertRequestRefused(_ string, status int, _ error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, status)
}

// TestServeAlertsDrivesTheSession: served on a loopback listener, a
// notification activates its triggers as AlertSource, the names that did
// not act are reported to the session, the notification is logged with
// its detail group; a request without the token reaches no trigger and is
// reported as refused; only /alertmanager is served; stop ends the server
// (goleak checks nothing of it is left).
func TestServeAlertsDrivesTheSession(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeAlertSession{known: []string{"slow_frame"}}
	var logged bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logged, nil))
	stop := ServeAlerts(ln, SessionAlertHandler(s, "s3cret", log))
	defer stop()
	base := "http://" + ln.Addr().String()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	post := func(path, auth string) int {
		req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(alertBody))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("/alertmanager", ""); code != http.StatusUnauthorized {
		t.Errorf("without the token: status %d, want 401", code)
	}
	if code := post("/metrics", "Bearer s3cret"); code != http.StatusNotFound {
		t.Errorf("another path: status %d, want 404", code)
	}
	if code := post("/alertmanager", "Bearer s3cret"); code != http.StatusOK {
		t.Errorf("with the token: status %d", code)
	}
	stop()

	s.mu.Lock()
	defer s.mu.Unlock()
	if !reflect.DeepEqual(s.producer, []string{AlertSource}) {
		t.Errorf("activations as %q, want one as %q", s.producer, AlertSource)
	}
	if want := [][]string{{AlertSource, "HighLatency"}}; !reflect.DeepEqual(s.refused, want) {
		t.Errorf("refused triggers %q, want %q", s.refused, want)
	}
	if !reflect.DeepEqual(s.requests, []int{http.StatusUnauthorized}) {
		t.Errorf("refused requests %v, want one 401", s.requests)
	}
	var rec map[string]any
	if err := json.Unmarshal(logged.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %s", err, logged.String())
	}
	d, _ := rec[logdetail.Key].(map[string]any)
	if rec["msg"] != "alertmanager: triggers [HighLatency slow_frame], acted [slow_frame]" || d == nil || d["acted"] == nil {
		t.Errorf("logged %s", logged.String())
	}
}
