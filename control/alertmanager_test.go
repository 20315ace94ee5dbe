package control

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const alertBody = `{"version":"4","status":"firing","receiver":"tracepipe","groupKey":"{}:{}",
"alerts":[
 {"status":"firing","labels":{"alertname":"HighLatency","severity":"page"},"annotations":{},"startsAt":"2026-01-01T00:00:00Z"},
 {"status":"resolved","labels":{"alertname":"DiskFull"}},
 {"status":"firing","labels":{"alertname":"Other","tracepipe_trigger":"slow_frame"}},
 {"status":"firing","labels":{"alertname":"HighLatency","instance":"b"}}
]}`

func TestAlertTriggers(t *testing.T) {
	names, err := AlertTriggers([]byte(alertBody))
	if err != nil || strings.Join(names, ",") != "HighLatency,slow_frame" {
		t.Fatalf("AlertTriggers = %v, %v", names, err)
	}
	for _, bad := range []string{`{`, `{"version":"3","alerts":[]}`, `{"alerts":[{"labels":{"alertname":"a b"}}]}`, `{"alerts":[{"labels":{}}]}`} {
		if _, err := AlertTriggers([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

func TestAlertHandler(t *testing.T) {
	var got []string
	h := AlertHandler(func(names []string) []string { got = names; return names[:1] })
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(alertBody))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || len(got) != 2 {
		t.Fatalf("status %d, triggers %v", resp.StatusCode, got)
	}
	for body, code := range map[string]int{
		"not json":                          http.StatusBadRequest,
		strings.Repeat(" ", MaxAlertBody+1): http.StatusRequestEntityTooLarge,
	} {
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Errorf("body of %d bytes: status %d, want %d", len(body), resp.StatusCode, code)
		}
	}
	resp, err = http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
}

// FuzzAlertTriggers: network input never panics; accepted names are valid.
func FuzzAlertTriggers(f *testing.F) {
	f.Add([]byte(alertBody))
	f.Add([]byte(`{"alerts":[{"labels":{"alertname":""}}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		names, err := AlertTriggers(b)
		if err != nil {
			return
		}
		if len(names) > MaxTriggers {
			t.Fatalf("%d names", len(names))
		}
		for _, n := range names {
			if ValidName("trigger", n) != nil {
				t.Fatalf("accepted %q", n)
			}
		}
	})
}
