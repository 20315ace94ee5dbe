package main

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/pipeline"
	"github.com/tracepipe/tracepipe/tracefile"
)

const firingStopNow = `{"version":"4","status":"firing","alerts":[{"status":"firing","labels":{"alertname":"stopnow"}}]}`

// postAlert posts an Alertmanager notification; auth is the
// Authorization header ("" = none). It returns the status, or 0 while
// nothing listens.
func postAlert(addr, auth, body string) int {
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/alertmanager", strings.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// --metrics-addr serves /metrics only: the webhook, which fires
// triggers, is not implied by it.
func TestAlertWebhookNotOnMetricsAddr(t *testing.T) {
	metricsAddr := freeLoopbackAddr(t)
	file := filepath.Join(t.TempDir(), "t.pftrace")
	cfg := sessionConfig(t, file, "")
	done := make(chan int, 1)
	go func() {
		_, _, code := runCLI(t, "run", "-c", cfg, "--duration", "3s", "--metrics-addr", metricsAddr,
			"--set", "data_sources[0].config.max_packets=0", "--set", "data_sources[0].config.rate=1000")
		done <- code
	}()
	waitUntil(t, "metrics served", 20*time.Second, func() bool { return strings.Contains(scrapeMaybe(metricsAddr), "tracepipe_") })
	if code := postAlert(metricsAddr, "", firingStopNow); code != http.StatusNotFound {
		t.Errorf("POST /alertmanager on --metrics-addr: status %d, want 404", code)
	}
	if code := <-done; code != exitOK {
		t.Fatalf("run: exit %d", code)
	}
}

// With --alert-token-file, requests without the token (or with another)
// get 401 and fire nothing: the stop_tracing trigger acts only for the
// request that carries it. The refusals are in run's summary and in the
// file's TraceStats.
func TestAlertWebhookToken(t *testing.T) {
	dir := t.TempDir()
	alertAddr := freeLoopbackAddr(t)
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "t.pftrace")
	cfg := sessionConfig(t, file, "trigger_config:\n  trigger_mode: stop_tracing\n  trigger_timeout: 2m\n  triggers:\n    - name: stopnow\n")
	type result struct {
		stderr string
		code   int
	}
	done := make(chan result, 1)
	go func() {
		_, stderr, code := runCLI(t, "run", "-c", cfg, "--duration", "2m", "--alert-addr", alertAddr, "--alert-token-file", tokenFile,
			"--set", "data_sources[0].config.max_packets=0", "--set", "data_sources[0].config.rate=1000")
		done <- result{stderr, code}
	}()
	waitUntil(t, "the webhook listening", 20*time.Second, func() bool { return postAlert(alertAddr, "", "{}") != 0 })
	// That probe was refused too: 1 so far.
	for _, auth := range []string{"", "Bearer wrong"} {
		if code := postAlert(alertAddr, auth, firingStopNow); code != http.StatusUnauthorized {
			t.Fatalf("Authorization %q: status %d, want 401", auth, code)
		}
	}
	select {
	case r := <-done:
		t.Fatalf("an unauthorized request ended the session: exit %d\n%s", r.code, r.stderr)
	default:
	}
	if code := postAlert(alertAddr, "Bearer s3cret", firingStopNow); code != http.StatusOK {
		t.Fatalf("with the token: status %d", code)
	}
	r := <-done
	if r.code != exitOK {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "alertmanager webhook: 3 request(s) refused") {
		t.Errorf("the summary does not report the 3 refused requests:\n%s", r.stderr)
	}
	if !strings.Contains(r.stderr, "refused (401)") {
		t.Errorf("no refusal was logged:\n%s", r.stderr)
	}
	pkts := tracetest.ReadAll(t, file)
	last, ok, err := tracefile.DecodeTraceStatsPacket(pkts[len(pkts)-1])
	if err != nil || !ok || last.Tracepipe == nil {
		t.Fatalf("the file does not end with TraceStats (%v)", err)
	}
	if n := last.Tracepipe.AlertRequestsRefused; n != 3 {
		t.Errorf("alert_requests_refused = %d in the file, want 3", n)
	}
	out, _, _ := runCLI(t, "stats", file)
	if !strings.Contains(out, "alert_requests_refused") {
		t.Errorf("stats does not show alert_requests_refused:\n%s", out)
	}
}

// A rate-limited trigger (max_per_24h) is refused: logged, counted in
// TraceStats, and shown in run's summary.
func TestAlertWebhookRateLimitedTriggerInSummary(t *testing.T) {
	dir := t.TempDir()
	alertAddr := freeLoopbackAddr(t)
	file := filepath.Join(dir, "t.pftrace")
	cfg := sessionConfig(t, file, "trigger_config:\n  trigger_mode: stop_tracing\n  trigger_timeout: 2m\n  triggers:\n    - name: stopnow\n      stop_delay: 1s\n      max_per_24h: 1\n")
	type result struct {
		stderr string
		code   int
	}
	done := make(chan result, 1)
	go func() {
		_, stderr, code := runCLI(t, "run", "-c", cfg, "--duration", "2m", "--alert-addr", alertAddr,
			"--set", "data_sources[0].config.max_packets=0", "--set", "data_sources[0].config.rate=1000")
		done <- result{stderr, code}
	}()
	waitUntil(t, "the webhook listening", 20*time.Second, func() bool { return postAlert(alertAddr, "", firingStopNow) == http.StatusOK })
	if code := postAlert(alertAddr, "", firingStopNow); code != http.StatusOK {
		t.Fatalf("second notification: status %d", code)
	}
	r := <-done
	if r.code != exitOK {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "triggers: 2 received, 1 acted, 1 refused") || !strings.Contains(r.stderr, "rate-limited 1") {
		t.Errorf("the summary does not report the rate-limited trigger:\n%s", r.stderr)
	}
	if !strings.Contains(r.stderr, "alertmanager: triggers [stopnow] refused") {
		t.Errorf("the refused trigger was not logged:\n%s", r.stderr)
	}
	pkts := tracetest.ReadAll(t, file)
	last, _, _ := tracefile.DecodeTraceStatsPacket(pkts[len(pkts)-1])
	if last.Tracepipe == nil || last.Tracepipe.TriggersRefused != 1 {
		t.Errorf("triggers_refused in the file: %+v, want 1", last.Tracepipe)
	}
}

// Refused and failed snapshots appear in run's summary.
func TestSummaryShowsRefusedSnapshots(t *testing.T) {
	var b bytes.Buffer
	printSummary(&b, &pipeline.Result{Snapshots: pipeline.SnapshotStats{Taken: 6, Refused: 4}}, tracefile.LossContext{})
	if want := "snapshots: 6 taken, 4 refused"; !strings.Contains(b.String(), want) {
		t.Errorf("summary %q lacks %q", b.String(), want)
	}
	b.Reset()
	printSummary(&b, &pipeline.Result{Snapshots: pipeline.SnapshotStats{Taken: 6}}, tracefile.LossContext{})
	if strings.Contains(b.String(), "snapshots:") {
		t.Errorf("a summary with nothing refused talks of snapshots: %q", b.String())
	}
}
