package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/pipeline"
)

// A remote sink that cannot deliver is a failing sink, whatever the
// reason: run exits 1 with the true cause in its summary, on_error: stop
// ends the session early (drop lets it run), and the local file's final
// TraceStats records the remote copy's loss, so `stats --fail-on-loss`
// on it exits 3 naming the sink.
func TestRemoteSinkFailures(t *testing.T) {
	deadAddr := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // nothing listens there now
		return addr
	}
	cases := []struct {
		name  string
		sink  func(t *testing.T) string // the sink's YAML (sinks[1])
		cause string                    // in the summary
	}{
		{"nats-no-stream", func(t *testing.T) string {
			return fmt.Sprintf("    nats:\n      url: %s\n      subject: nostream.z\n      batch_size: 16KiB\n      max_batches: 2\n      close_timeout: 300ms\n", startNATSServer(t))
		}, `no JetStream stream listens on subject "nostream.z"`},
		{"nats-down", func(t *testing.T) string {
			return fmt.Sprintf("    nats:\n      url: nats://%s\n      subject: t.x\n      batch_size: 16KiB\n      max_batches: 2\n      close_timeout: 300ms\n", deadAddr(t))
		}, "connection refused"},
		{"relay-dead-port", func(t *testing.T) string {
			return fmt.Sprintf("    relay:\n      address: %s\n      batch_size: 16KiB\n      max_batches: 2\n      close_timeout: 300ms\n", deadAddr(t))
		}, "connection refused"},
		// Nothing dropped yet (the default 16 MiB queue): the receiver
		// never reached within first_contact_timeout is the failure.
		{"relay-never-reached", func(t *testing.T) string {
			return fmt.Sprintf("    relay:\n      address: %s\n      first_contact_timeout: 300ms\n      close_timeout: 300ms\n", deadAddr(t))
		}, "not reached since"},
		{"relay-tls-mismatch", func(t *testing.T) string {
			addr, _ := startServe(t, serveFlags{listen: "127.0.0.1:0", out: t.TempDir()})
			return fmt.Sprintf("    relay:\n      address: %s\n      tls: true\n      batch_size: 16KiB\n      max_batches: 2\n      close_timeout: 300ms\n", addr)
		}, "TLS"},
	}
	for _, tc := range cases {
		for _, policy := range []string{"stop", "drop"} {
			t.Run(tc.name+"/"+policy, func(t *testing.T) {
				typ := "nats"
				if strings.HasPrefix(tc.name, "relay") {
					typ = "relay"
				}
				file := filepath.Join(t.TempDir(), "local.pftrace")
				duration := "2s"
				if policy == "stop" {
					duration = "60s" // ended by the failure, long before
				}
				cfg := sessionConfig(t, file, fmt.Sprintf("  - type: %s\n    on_error: %s\n%s", typ, policy, tc.sink(t)))
				_, stderr, code := runCLI(t, "run", "-c", cfg, "--duration", duration,
					"--set", "data_sources[0].config.max_packets=0", "--set", "data_sources[0].config.rate=2000")
				if code != exitError {
					t.Fatalf("run: exit %d, want %d\n%s", code, exitError, stderr)
				}
				summary := stderr
				if !strings.Contains(summary, "sinks[1]: FAILED") || !strings.Contains(summary, tc.cause) {
					t.Errorf("the summary does not give the cause %q:\n%s", tc.cause, summary)
				}
				if strings.Contains(summary, "no data loss") || strings.Contains(summary, "queue full") {
					t.Errorf("the summary hides the loss or blames the queue:\n%s", summary)
				}
				stopped := strings.Contains(summary, "session stopped (on_error: stop)")
				if stopped != (policy == "stop") {
					t.Errorf("on_error: %s: session stopped by the sink = %v\n%s", policy, stopped, summary)
				}
				out, serr, code := runCLI(t, "stats", "--fail-on-loss", file)
				if code != exitDataLoss {
					t.Fatalf("stats --fail-on-loss on the local file: exit %d, want %d\n%s%s", code, exitDataLoss, out, serr)
				}
				if !strings.Contains(out+serr, "sinks[1] (") || !strings.Contains(out, "another copy of this session") || !strings.Contains(out, tc.cause) {
					t.Errorf("the local file's loss report does not name sinks[1] and its cause %q:\n%s%s", tc.cause, out, serr)
				}
			})
		}
	}
}

// A receiver stopped and restarted mid-session within what the relay
// sink's queue holds loses nothing: the sender logs one outage and its
// end, counts a reconnect (info), reports no data loss and exits 0, and
// the received trace holds every packet of the local file.
func TestRelayReceiverRestartIsNoLoss(t *testing.T) {
	addr, out := freeLoopbackAddr(t), t.TempDir()
	_, stop := startServe(t, serveFlags{listen: addr, out: out})
	file := filepath.Join(t.TempDir(), "local.pftrace")
	cfg := sessionConfig(t, file, fmt.Sprintf("  - type: relay\n    relay:\n      address: %s\n      backoff_max: 100ms\n", addr))
	type result struct {
		stderr string
		code   int
	}
	done := make(chan result, 1)
	go func() {
		_, stderr, code := runCLI(t, "run", "-c", cfg, "--duration", "3s",
			"--set", "data_sources[0].config.max_packets=0", "--set", "data_sources[0].config.rate=2000")
		done <- result{stderr, code}
	}()
	waitUntil(t, "the receiver storing packets", 20*time.Second, func() bool {
		names, _ := filepath.Glob(filepath.Join(out, "*.pftrace"))
		if len(names) != 1 {
			return false
		}
		fi, err := os.Stat(names[0])
		return err == nil && fi.Size() > 64<<10
	})
	stop()
	_, stop = startServe(t, serveFlags{listen: addr, out: out})
	r := <-done
	stop()
	if r.code != exitOK {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"unreachable since", "resumed after", "nothing lost", "outage(s) of the destination, resumed", "tracepipe: no data loss"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if n := strings.Count(r.stderr, "unreachable since"); n != 1 {
		t.Errorf("%d outage lines, want 1:\n%s", n, r.stderr)
	}
	if strings.Contains(r.stderr, "sink_errors") || strings.Contains(r.stderr, "FAILED") {
		t.Errorf("a restart that lost nothing is reported as an error:\n%s", r.stderr)
	}
	comparePackets(t, file, onlyTrace(t, out))
}

// A network sink's outage, with its cause, is on the status line.
func TestStatusLineShowsSinkOutage(t *testing.T) {
	line := statusLine(pipeline.Status{SinkOutages: []string{"sinks[1]: dial tcp 127.0.0.1:7010: connect: connection refused"}})
	if !strings.Contains(line, "UNREACHABLE sinks[1]: dial tcp 127.0.0.1:7010: connect: connection refused") {
		t.Errorf("status line %q", line)
	}
}

// natsProc is a nats-server -js the test can stop and start again on the
// same port and store (an outage).
type natsProc struct {
	t        *testing.T
	bin      string
	addr     string
	storeDir string
	cmd      *exec.Cmd
}

func newNATSProc(t *testing.T) *natsProc {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if _, e := os.Stat("/usr/sbin/nats-server"); e == nil {
			bin, err = "/usr/sbin/nats-server", nil
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("nats-server not found (CI installs it): %v", err)
		}
		t.Skipf("nats-server not installed: %v", err)
	}
	n := &natsProc{t: t, bin: bin, addr: freeLoopbackAddr(t), storeDir: t.TempDir()}
	t.Cleanup(n.stop)
	n.start()
	return n
}

func (n *natsProc) start() {
	n.t.Helper()
	_, port, _ := net.SplitHostPort(n.addr)
	n.cmd = exec.Command(n.bin, "-js", "-a", "127.0.0.1", "-p", port, "-sd", n.storeDir)
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	waitUntil(n.t, "nats-server listening", 20*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", n.addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

func (n *natsProc) stop() {
	if n.cmd != nil {
		_ = n.cmd.Process.Kill()
		_ = n.cmd.Wait()
		n.cmd = nil
	}
}

// NATS stopped and restarted mid-session, within what the sink's queue
// holds: one outage line with its cause, one resumed line saying nothing
// was lost, no data loss in the summary, exit 0.
func TestNATSOutageMidSessionIsNoLoss(t *testing.T) {
	srv := newNATSProc(t)
	metricsAddr := freeLoopbackAddr(t)
	file := filepath.Join(t.TempDir(), "local.pftrace")
	cfg := sessionConfig(t, file, fmt.Sprintf("  - type: nats\n    nats:\n      url: nats://%s\n      subject: outage.cli\n      create_stream: true\n      backoff_max: 100ms\n", srv.addr))
	type result struct {
		stderr string
		code   int
	}
	done := make(chan result, 1)
	go func() {
		_, stderr, code := runCLI(t, "run", "-c", cfg, "--duration", "4s", "--metrics-addr", metricsAddr,
			"--set", "data_sources[0].config.max_packets=0", "--set", "data_sources[0].config.rate=1000")
		done <- result{stderr, code}
	}()
	gauge := `tracepipe_sink_unreachable{destination="nats://` + srv.addr + ` outage.cli",sink="sinks[1]"} `
	written := `tracepipe_sink_packets_written_total{destination="nats://` + srv.addr + ` outage.cli",sink="sinks[1]"} `
	waitUntil(t, "the nats sink delivering", 20*time.Second, func() bool {
		m := scrapeMaybe(metricsAddr)
		return strings.Contains(m, written) && !strings.Contains(m, written+"0\n")
	})
	srv.stop()
	waitUntil(t, "the outage noticed", 20*time.Second, func() bool { return strings.Contains(scrapeMaybe(metricsAddr), gauge+"1\n") })
	srv.start()
	waitUntil(t, "the outage over", 20*time.Second, func() bool { return strings.Contains(scrapeMaybe(metricsAddr), gauge+"0\n") })
	r := <-done
	if r.code != exitOK {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	if n := strings.Count(r.stderr, "unreachable since"); n != 1 {
		t.Errorf("%d outage lines, want 1:\n%s", n, r.stderr)
	}
	if n := strings.Count(r.stderr, "resumed after"); n != 1 || !strings.Contains(r.stderr, "nothing lost") {
		t.Errorf("%d resumed lines, want 1 saying nothing lost:\n%s", n, r.stderr)
	}
	if !strings.Contains(r.stderr, "tracepipe: no data loss") || strings.Contains(r.stderr, "FAILED") {
		t.Errorf("an outage that lost nothing is reported as a loss:\n%s", r.stderr)
	}
}
