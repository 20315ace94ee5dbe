package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/tracefile"
)

// sessionConfig is a finite session (a deterministic synthetic load) with
// a file sink and the extra sink given as YAML lines.
func sessionConfig(t *testing.T, file, extraSink string) string {
	t.Helper()
	cfg := fmt.Sprintf(`duration: 30s
write_into_file: true
file_write_period: 100ms
buffers:
  - size_kb: 8192
data_sources:
  - name: tracepipe.synthetic
    buffer_exhausted_policy: stall
    config:
      writers: 3
      rate: 0
      packet_size: 512
      max_packets: 4000
      deterministic_timestamps: true
sinks:
  - type: file
    path: %s
%s`, file, extraSink)
	name := filepath.Join(t.TempDir(), "session.yaml")
	if err := os.WriteFile(name, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return name
}

// startServe runs `tracepipe serve` in-process until the test ends (or
// stop is called) and returns the relay address.
func startServe(t *testing.T, f serveFlags) (addr string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	var stderr testsupport.LockedBuffer
	go func() { done <- serve(ctx, f, &stderr, func(a string) { ready <- a }) }()
	if f.listen != "" {
		select {
		case addr = <-ready:
		case err := <-done:
			t.Fatalf("serve: %v\n%s", err, stderr.String())
		case <-time.After(10 * time.Second):
			t.Fatal("serve did not start listening")
		}
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v\n%s", err, stderr.String())
			}
		})
	}
	t.Cleanup(stop)
	return addr, stop
}

// comparePackets asserts that got (a remote copy) holds the packets of
// want (the file sink's output) in the same order. TraceStats packets are
// compared by count only: each sink's TraceStats carries its own sink
// counters. The receiver's own packets (receiver sections serve adds
// after each TraceStats of the sender) are left out.
func comparePackets(t *testing.T, wantFile, gotFile string) {
	t.Helper()
	want, got := tracetest.ReadAll(t, wantFile), senderPackets(t, tracetest.ReadAll(t, gotFile))
	split := func(pkts [][]byte) (data [][]byte, stats int) {
		for _, p := range pkts {
			info, err := tracefile.DecodePacket(p)
			if err != nil {
				t.Fatal(err)
			}
			if info.Kind() == "trace_stats" {
				stats++
				continue
			}
			data = append(data, p)
		}
		return data, stats
	}
	wd, ws := split(want)
	gd, gs := split(got)
	if ws != gs {
		t.Errorf("%d TraceStats packets remotely, %d in the file", gs, ws)
	}
	if len(wd) != len(gd) {
		t.Fatalf("%d packets remotely, the file sink wrote %d", len(gd), len(wd))
	}
	for i := range wd {
		if !bytes.Equal(wd[i], gd[i]) {
			t.Fatalf("packet %d differs from the file sink's", i)
		}
	}
	if len(wd) < 12000 {
		t.Errorf("only %d packets: the session did not run as configured", len(wd))
	}
}

// senderPackets drops the packets serve wrote itself (TraceStats with a
// receiver section) from a received trace's packets.
func senderPackets(t *testing.T, pkts [][]byte) [][]byte {
	t.Helper()
	var out [][]byte
	for _, p := range pkts {
		if ts, ok, err := tracefile.DecodeTraceStatsPacket(p); err == nil && ok && ts.Tracepipe != nil && ts.Tracepipe.Receiver != nil {
			continue
		}
		out = append(out, p)
	}
	return out
}

func onlyTrace(t *testing.T, dir string) string {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "*.pftrace"))
	if len(names) != 1 {
		t.Fatalf("%s holds %v, want one trace", dir, names)
	}
	return names[0]
}

// A session with a file sink and a relay sink to `tracepipe serve`: the
// received trace holds the file's packets, in order.
func TestServeRelayEqualsFileSink(t *testing.T) {
	out := t.TempDir()
	addr, stop := startServe(t, serveFlags{listen: "127.0.0.1:0", out: out})
	file := filepath.Join(t.TempDir(), "local.pftrace")
	cfg := sessionConfig(t, file, fmt.Sprintf("  - type: relay\n    relay:\n      address: %s\n      hostname: sender-a\n", addr))
	if _, stderr, code := runCLI(t, "run", "-c", cfg); code != exitOK {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	stop()
	comparePackets(t, file, onlyTrace(t, out))
}

// The same through NATS JetStream: run publishes, serve --from-nats
// reads the subject back.
func TestServeFromNATSEqualsFileSink(t *testing.T) {
	url := startNATSServer(t)
	file := filepath.Join(t.TempDir(), "local.pftrace")
	cfg := sessionConfig(t, file, fmt.Sprintf("  - type: nats\n    nats:\n      url: %s\n      subject: traces.cli\n      create_stream: true\n", url))
	if _, stderr, code := runCLI(t, "run", "-c", cfg); code != exitOK {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	out := t.TempDir()
	metricsAddr := freeLoopbackAddr(t)
	_, stop := startServe(t, serveFlags{natsURL: url, subject: "traces.cli", durable: "cli-test", out: out, metricsAddr: metricsAddr})
	want := len(tracetest.ReadAll(t, file))
	deadline := time.Now().Add(30 * time.Second)
	for {
		body := scrape(t, metricsAddr)
		if strings.Contains(body, fmt.Sprintf("tracepipe_serve_packets_total %d\n", want)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not store %d packets in 30s; metrics:\n%s", want, grepLines(body, "tracepipe_serve"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	comparePackets(t, file, onlyTrace(t, out))
}

// run --metrics-addr exposes the session's counters while it runs.
func TestRunMetrics(t *testing.T) {
	addr := freeLoopbackAddr(t)
	file := filepath.Join(t.TempDir(), "m.pftrace")
	cfg := sessionConfig(t, file, "")
	done := make(chan int, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		done <- runContext(ctx, []string{"run", "-c", cfg, "--duration", "20s", "--set", "data_sources[0].config.max_packets=0", "--set", "data_sources[0].config.rate=2000", "--metrics-addr", addr}, io.Discard, io.Discard)
	}()
	var body string
	deadline := time.Now().Add(20 * time.Second)
	for {
		body = scrapeMaybe(addr)
		if strings.Contains(body, "tracepipe_sink_packets_written_total{") && !strings.Contains(body, "tracepipe_session_packets_out_total 0\n") &&
			strings.Contains(body, "tracepipe_session_packets_out_total") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session metrics within 20s:\n%s", grepLines(body, "tracepipe_"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("run: exit %d", code)
	}
	for _, want := range []string{
		`tracepipe_buffer_chunks_written_total{buffer="0",name=""}`,
		`tracepipe_buffer_unread_bytes{buffer="0",name=""}`,
		`tracepipe_producer_packets_dropped_total{buffer="0",data_source="tracepipe.synthetic",producer="1"}`,
		`tracepipe_sink_lane_queue_batches{destination="` + file + `",sink="sinks[0]"}`,
		`tracepipe_trace_stats_producers_connected_total `,
		`tracepipe_trace_stats_sink_packets_dropped_total `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func scrapeMaybe(addr string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startNATSServer runs nats-server -js on a free loopback port for the
// test. Without nats-server it fails under CI=true, skips otherwise.
func startNATSServer(t *testing.T) string {
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
	addr := freeLoopbackAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "-js", "-a", "127.0.0.1", "-p", port, "-sd", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return "nats://" + addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server did not listen: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A relay sink whose receiver is away longer than its queue holds: the
// receiver, once up, gets a trace whose last TraceStats counts exactly
// the packets that never arrived.
func TestRelayLossReachesSenderTraceStats(t *testing.T) {
	addr, metricsAddr := freeLoopbackAddr(t), freeLoopbackAddr(t)
	file := filepath.Join(t.TempDir(), "local.pftrace")
	cfg := sessionConfig(t, file, fmt.Sprintf("  - type: relay\n    relay:\n      address: %s\n      max_batches: 2\n      backoff_max: 50ms\n", addr))
	done := make(chan string, 1)
	go func() {
		_, stderr, code := runCLI(t, "run", "-c", cfg, "--duration", "2s", "--metrics-addr", metricsAddr,
			"--set", "data_sources[0].config.max_packets=0", "--set", "data_sources[0].config.rate=2000")
		// Packets lost while the receiver was away fail the relay sink
		// (on_error: drop): the session runs on, and run exits 1.
		if code != exitError || !strings.Contains(stderr, "sinks[1]: FAILED") {
			stderr = fmt.Sprintf("exit %d (want %d and the relay sink FAILED): %s", code, exitError, stderr)
		} else {
			stderr = ""
		}
		done <- stderr
	}()
	// Read passes (100 ms apart) with nobody listening overflow the
	// 2-batch queue; the relay sink's drop counter (lost to the outage)
	// says when.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(scrapeMaybe(metricsAddr), `tracepipe_sink_packets_dropped_error_total{destination="relay tcp://`+addr+`",sink="sinks[1]"} `) ||
		strings.Contains(scrapeMaybe(metricsAddr), `tracepipe_sink_packets_dropped_error_total{destination="relay tcp://`+addr+`",sink="sinks[1]"} 0`+"\n") {
		if time.Now().After(deadline) {
			t.Fatal("the relay sink dropped nothing while its receiver was away")
		}
		time.Sleep(10 * time.Millisecond)
	}
	out := t.TempDir()
	_, stop := startServe(t, serveFlags{listen: addr, out: out})
	if msg := <-done; msg != "" {
		t.Fatal(msg)
	}
	stop()
	local := tracetest.ReadAll(t, file)
	got := senderPackets(t, tracetest.ReadAll(t, onlyTrace(t, out)))
	last, ok, err := tracefile.DecodeTraceStatsPacket(got[len(got)-1])
	if err != nil || !ok || last.Tracepipe == nil {
		t.Fatalf("the received trace does not end with TraceStats (%v)", err)
	}
	dropped := last.Tracepipe.SinkPacketsDropped
	if dropped == 0 {
		t.Fatal("the relay sink reported no loss although its receiver was away")
	}
	if uint64(len(got))+dropped != uint64(len(local)) {
		t.Errorf("received %d + reported dropped %d != %d packets the session wrote", len(got), dropped, len(local))
	}
}

// A relay sink whose destination accepts connections and then never
// reads nor answers: the file sink's output is complete, the relay sink's
// loss is counted, and the session ends within the relay's close_timeout
// after its duration.
func TestBlockedRelayDestinationDoesNotHoldOthers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() { // accept and hold, never read
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	file := filepath.Join(t.TempDir(), "local.pftrace")
	cfg := sessionConfig(t, file, fmt.Sprintf("  - type: relay\n    when_full: drop\n    relay:\n      address: %s\n      max_batches: 4\n      dial_timeout: 200ms\n      close_timeout: 300ms\n", ln.Addr()))
	start := time.Now()
	_, stderr, code := runCLI(t, "run", "-c", cfg, "--duration", "1s",
		"--set", "data_sources[0].config.max_packets=0", "--set", "data_sources[0].config.rate=5000")
	// The relay sink delivered nothing: it failed (on_error: drop), and
	// run says so with its exit code.
	if code != exitError || !strings.Contains(stderr, "sinks[1]: FAILED") {
		t.Fatalf("run: exit %d, want %d with sinks[1] FAILED\n%s", code, exitError, stderr)
	}
	// The stop bound: the relay's close_timeout, far below the pipeline's
	// 30 s sink close limit that a sink waiting on its destination would hit.
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("the session took %v to end: the blocked sink held its stop", d)
	}
	pkts := tracetest.ReadAll(t, file)
	last, ok, err := tracefile.DecodeTraceStatsPacket(pkts[len(pkts)-1])
	if err != nil || !ok || last.Tracepipe == nil {
		t.Fatalf("the file does not end with TraceStats (%v)", err)
	}
	if w := last.Tracepipe.SinkPacketsWritten; w != uint64(len(pkts)) || last.Tracepipe.SinkPacketsDropped != 0 {
		t.Errorf("file sink: %d packets in the file, its stats say %d written, %d dropped", len(pkts), w, last.Tracepipe.SinkPacketsDropped)
	}
	if len(pkts) < 3000 {
		t.Errorf("only %d packets in the file: the file sink was held back", len(pkts))
	}
	if !strings.Contains(stderr, "sink_packets_dropped=") {
		t.Errorf("the run summary does not report the relay sink's loss:\n%s", stderr)
	}
}
