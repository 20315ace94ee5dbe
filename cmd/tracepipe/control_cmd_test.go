package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/control"
	"github.com/tracepipe/tracepipe/tpimport"
)

// cli runs the CLI in this process and returns its exit code and output.
func cli(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// The flight recorder from the command line: a named ring session is
// listed by `sessions`, snapshotted by `snapshot -o` and SIGUSR1,
// triggered by `trigger`, refused a second run with its name, and
// stopped by `stop`; every snapshot stands alone (check clean).
func TestControlCommandsEndToEnd(t *testing.T) {
	rt, err := os.MkdirTemp("", "tprt") // short: socket paths are limited to 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(rt)
	t.Setenv("XDG_RUNTIME_DIR", rt) // inherited by the child
	dir := t.TempDir()
	cfg := filepath.Join(dir, "flight.yaml")
	live := filepath.Join(dir, "live.pftrace")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
unique_session_name: flight-test
buffers: [{size_kb: 1024}]
data_sources:
  - name: tracepipe.synthetic
    config: {writers: 2, rate: 2000, packet_size: 128}
trigger_config:
  trigger_mode: clone_snapshot
  triggers: [{name: oops}]
sinks: [{type: file, path: %q}]
`, live)), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	alertAddr := ln.Addr().String()
	ln.Close()
	cmd, stderr := startCLI(t, "run", "-c", cfg, "--duration", "10m", "--alert-addr", alertAddr)
	sock := filepath.Join(rt, "tracepipe", fmt.Sprintf("flight-test.%d.sock", cmd.Process.Pid))
	waitFile(t, sock)
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v %v; want mode 0600", fi, err)
	}
	code, out, errs := cli("sessions")
	if code != 0 || !strings.Contains(out, "flight-test") || !strings.Contains(out, fmt.Sprint(cmd.Process.Pid)) {
		t.Fatalf("sessions: %d %q %q", code, out, errs)
	}
	// A second session with the same name is refused.
	second, _ := startCLI(t, "run", "-c", cfg, "--duration", "10m", "-o", filepath.Join(dir, "second.pftrace"))
	if c := waitExit(t, second); c != 1 {
		t.Fatalf("a second run with the same unique_session_name exited %d; want 1", c)
	}
	snap := filepath.Join(dir, "manual.pftrace")
	code, out, errs = cli("snapshot", "-o", snap, "--session", "flight-test")
	if code != 0 || strings.TrimSpace(out) != snap {
		t.Fatalf("snapshot: %d %q %q", code, out, errs)
	}
	// An unknown name is an error naming it, and activates nothing (it
	// printed "acted: oops; ignored ...: 1" and exited 0).
	code, out, errs = cli("trigger", "oops", "nope")
	if code == 0 || out != "" || !strings.Contains(errs, `unknown trigger "nope": the session's triggers are oops (nothing was activated)`) {
		t.Fatalf("trigger oops nope: %d %q %q", code, out, errs)
	}
	code, out, errs = cli("trigger", "oops")
	if code != 0 || !strings.Contains(out, "acted: oops") || !strings.Contains(out, "ignored (skipped or rate-limited): 0") {
		t.Fatalf("trigger: %d %q %q", code, out, errs)
	}
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	want := []string{snap, filepath.Join(dir, "live.snap-2-oops.pftrace"), filepath.Join(dir, "live.snap-3-sigusr1.pftrace"),
		filepath.Join(dir, "live.snap-4-oops.pftrace")}
	for i, f := range want[1:] {
		if i == 2 { // an Alertmanager notification whose alert is named like the trigger
			// At most 2 snapshots are in flight (more are refused): wait
			// until the earlier ones are written, not just created.
			waitTaken(t, filepath.Join(rt, "tracepipe"), 3)
			body := `{"version":"4","status":"firing","alerts":[{"status":"firing","labels":{"alertname":"oops"}}]}`
			resp, err := http.Post("http://"+alertAddr+"/alertmanager", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("alertmanager webhook: %s", resp.Status)
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			if _, err := os.Stat(f); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never appeared", f) // stderr is shown once the child exited
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// A ring session writes its file only at stop: rotate closes nothing
	// (it left a first file holding a lone TraceStats) and says why.
	code, _, errs = cli("rotate", "--session", fmt.Sprint(cmd.Process.Pid))
	if code == 0 || !strings.Contains(errs, "no file rotated") || !strings.Contains(errs, "write_into_file is false") {
		t.Fatalf("rotate: %d %q", code, errs)
	}
	if code, _, errs = cli("stop"); code != 0 {
		t.Fatalf("stop: %d %q", code, errs)
	}
	if c := waitExit(t, cmd); c != 0 {
		t.Fatalf("run exited %d after stop: %s", c, stderr)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket left behind after the session: %v", err)
	}
	for _, f := range want {
		completeTrace(t, f)
		if code, _, errs := cli("stats", f); code != 0 && code != 3 {
			t.Fatalf("stats %s: exit %d %s", f, code, errs)
		}
		rep, err := tpimport.CheckFile(f, tpimport.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if codes := rep.Codes(); len(codes) != 0 {
			t.Fatalf("%s: check %v", f, codes)
		}
	}
	if code, _, errs := cli("snapshot"); code != 1 || !strings.Contains(errs, "no running tracepipe session") {
		t.Fatalf("snapshot without a session: %d %q", code, errs)
	}
}

// waitTaken waits (bounded) until the only session in dir has written n
// snapshots.
func waitTaken(t *testing.T, dir string, n uint64) {
	t.Helper()
	ep, err := control.Find(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := control.Dial(ep)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		in, err := c.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if in.GetSnapshotsTaken() >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d snapshots taken after 60 s; want %d", in.GetSnapshotsTaken(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
