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
	h := AlertHandler(func(names []string) []string { got = names; return names[:1] }, AlertOptions{})
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

// With a token, a request without it or with another gets 401, reaches
// no trigger and is reported as refused; the right one acts.
func TestAlertHandlerToken(t *testing.T) {
	var acted, refused int
	h := AlertHandler(func(names []string) []string { acted++; return names }, AlertOptions{Token: "s3cret",
		Refused: func(peer string, status int, why error) {
			if status != http.StatusUnauthorized || peer == "" || why == nil {
				t.Errorf("refused(%q, %d, %v)", peer, status, why)
			}
			refused++
		}})
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func(auth string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(alertBody))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, auth := range []string{"", "Bearer wrong", "Bearer s3cret2", "Basic s3cret", "s3cret"} {
		if code := post(auth); code != http.StatusUnauthorized {
			t.Errorf("Authorization %q: status %d, want 401", auth, code)
		}
	}
	if acted != 0 || refused != 5 {
		t.Fatalf("after 5 unauthorized requests: %d activations, %d refusals counted", acted, refused)
	}
	if code := post("Bearer s3cret"); code != http.StatusOK || acted != 1 {
		t.Fatalf("with the token: status %d, %d activations", code, acted)
	}
}

func TestAlertListenAddr(t *testing.T) {
	for in, want := range map[string]string{":9466": "127.0.0.1:9466", "0.0.0.0:9466": "0.0.0.0:9466", "[::1]:1": "[::1]:1"} {
		if got, err := AlertListenAddr(in); err != nil || got != want {
			t.Errorf("AlertListenAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := AlertListenAddr("9466"); err == nil {
		t.Error("an address without a port was accepted")
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
