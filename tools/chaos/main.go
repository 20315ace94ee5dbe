// Command chaos is tracepipe's chaos soak (issue 24): a real `tracepipe
// run` session under load from three kinds of producers — the in-process
// tracepipe.synthetic source, the same source as a plugin (restart on),
// and a Perfetto producer double speaking the wire protocol over the
// producer socket — streaming into four sinks: a rotating file sink (the
// reference), a second file sink on a small tmpfs (the Perfetto double's
// packets only, so that only the disk-full fault fills it), a relay sink into a
// `tracepipe serve` process and a NATS sink into a nats-server. Every
// source uses the stall policy.
//
// Meanwhile, round-robin on a schedule, it injects faults: kill -9 of the
// plugin, a restart of nats-server, kill -9 and restart of the relay
// receiver, the small sink's file system filled, the service stopped
// (SIGSTOP/SIGCONT) in short bursts, a CPU hog beside it, `tracepipe
// rotate` and `tracepipe snapshot`.
//
// At the end it reconciles, per sequence: packets emitted = packets found
// + packets counted lost. In the reference every packet index from 0 to
// the highest one found must be there exactly once; a gap is counted when
// the packet after it carries previous_packet_dropped (the service saw and
// counted the loss), unexplained otherwise. The copies (small sink, relay,
// NATS read back through `serve --from-nats`) must hold the reference's
// packets but for at most their own sink_packets_dropped. The figures go
// to chaos.csv (one row per output and sequence), the RSS of the session,
// serve and nats-server every sample period to rss.csv, and the last line
// of output is
//
//	chaos: emitted N, delivered D, lost (counted) L by cause …, unexplained U
//
// The exit status is non-zero when U is not 0 or the run could not be
// judged. Not part of `make test`: `make chaos` (CHAOS_DURATION, default
// 30m). It owns no library code.
package main

import (
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/sinks/celfilter"
)

type options struct {
	duration  time.Duration
	every     time.Duration
	sample    time.Duration
	dir       string
	rate      int
	plugRate  int
	perfRate  int
	smallMB   int
	rssTol    float64
	keep      bool
	natsPath  string
	faultList string
	strict    bool
}

// Its configs may filter sinks (sinks.UseFilterCompiler).
func init() { sinks.UseFilterCompiler(celfilter.Compile) }

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", 30*time.Minute, "session length")
	flag.DurationVar(&o.every, "every", 0, "time between faults (default: duration/15, within [5s, 60s])")
	flag.DurationVar(&o.sample, "sample", 5*time.Second, "sampling period of RSS, threads and fds")
	flag.StringVar(&o.dir, "out", "", "working directory (default: a new temporary directory)")
	flag.IntVar(&o.rate, "rate", 1000, "packets/s per in-process synthetic writer (4 writers)")
	flag.IntVar(&o.plugRate, "plugin-rate", 500, "packets/s per plugin writer (2 writers)")
	flag.IntVar(&o.perfRate, "perfetto-rate", 500, "packets/s of the Perfetto double")
	flag.IntVar(&o.smallMB, "small-mb", 64, "size of the tmpfs of the sink whose disk is filled")
	flag.Float64Var(&o.rssTol, "rss-tolerance", 0.15, "RSS flatness bound (runs of 10 minutes or more): last third vs minutes 5-10 equivalent")
	flag.BoolVar(&o.keep, "keep", false, "keep the working directory (it is kept anyway when the run fails)")
	flag.StringVar(&o.natsPath, "nats-server", "", "nats-server binary (default: PATH, else /usr/sbin/nats-server)")
	flag.StringVar(&o.faultList, "faults", "kill-plugin,restart-nats,rotate,kill-serve,disk-full,sigstop,snapshot,cpu-hog", "faults, in round-robin order")
	flag.BoolVar(&o.strict, "fail-on-counters", false, "also fail when the reference's own data-loss counters other than plugin deaths are non-zero (zero loss under the stall policy), even with no packet missing; other sinks' recorded loss is checked in their copies")
	flag.Parse()
	ok, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos: FAIL:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// soak is one run's state.
type soak struct {
	o                      options
	dir, bin, env          string
	tp, plugin             string
	nats, serve, session   *proc
	natsURL, relayAddr     string
	smallDir, smallMounted string
	sock                   string
	name                   string
	cleaned                bool

	mu     sync.Mutex
	faults []faultRecord
	notes  []string
}

type faultRecord struct {
	at   time.Duration
	name string
	err  error
}

func (s *soak) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.notes = append(s.notes, msg)
	s.mu.Unlock()
	fmt.Println("chaos:", msg)
}

func run(o options) (bool, error) {
	if o.every == 0 {
		o.every = min(max(o.duration/15, 5*time.Second), time.Minute)
	}
	s := &soak{o: o, name: fmt.Sprintf("chaos-%d", os.Getpid())}
	if o.dir == "" {
		d, err := os.MkdirTemp("", "tracepipe-chaos-")
		if err != nil {
			return false, err
		}
		o.dir = d
	}
	s.dir = o.dir
	for _, d := range []string{"bin", "out", "small", "relay", "natsout", "run", "nats", "logs"} {
		if err := os.MkdirAll(filepath.Join(s.dir, d), 0o755); err != nil {
			return false, err
		}
	}
	s.bin = filepath.Join(s.dir, "bin")
	var err error
	if s.tp, err = goBuild(s.bin, "./cmd/tracepipe"); err != nil {
		return false, err
	}
	if s.plugin, err = goBuild(s.bin, "./plugins/internal/syntheticplugin"); err != nil {
		return false, err
	}
	defer s.cleanup()
	if err := s.setupSmall(); err != nil {
		return false, err
	}
	if err := s.startServers(); err != nil {
		return false, err
	}
	ok, last, err := s.soak()
	s.cleanup()
	if ok && err == nil && !o.keep {
		// The traces are large; the figures and logs stay.
		for _, d := range []string{"out", "small", "relay", "natsout", "nats", "bin"} {
			_ = os.RemoveAll(filepath.Join(s.dir, d))
		}
		fmt.Printf("chaos: removed the traces (-keep keeps them; a failed run keeps them); figures in %s/chaos.csv and %s/rss.csv, logs in %s/logs\n", s.dir, s.dir, s.dir)
	}
	if last != "" {
		fmt.Println(last)
	}
	return ok, err
}

// setupSmall mounts a small tmpfs for the sink whose disk gets filled; when
// mounting is not allowed the sink writes into a plain directory and the
// disk-full fault fills the disk with a file as large as the free space
// allows, bounded.
func (s *soak) setupSmall() error {
	s.smallDir = filepath.Join(s.dir, "small")
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm", s.o.smallMB), "tmpfs", s.smallDir).CombinedOutput()
	if err != nil {
		s.note("no tmpfs for the small sink (%v: %s): the disk-full fault will not run", err, strings.TrimSpace(string(out)))
		return nil
	}
	s.smallMounted = s.smallDir
	return nil
}

func (s *soak) cleanup() {
	if s.cleaned {
		return
	}
	s.cleaned = true
	if s.session != nil && s.session.cmd != nil {
		_ = s.session.cmd.Process.Signal(syscall.SIGCONT)
		_ = s.session.stop(syscall.SIGKILL, 5*time.Second)
	}
	for _, p := range []*proc{s.serve, s.nats} {
		if p != nil {
			_ = p.stop(syscall.SIGTERM, 10*time.Second)
		}
	}
	if s.smallMounted != "" {
		_ = exec.Command("umount", s.smallMounted).Run()
	}
}

func (s *soak) startServers() error {
	natsBin := s.o.natsPath
	if natsBin == "" {
		if p, err := exec.LookPath("nats-server"); err == nil {
			natsBin = p
		} else {
			natsBin = "/usr/sbin/nats-server"
		}
	}
	np, err := freePort()
	if err != nil {
		return err
	}
	s.natsURL = fmt.Sprintf("nats://127.0.0.1:%d", np)
	if s.nats, err = newProc("nats-server", filepath.Join(s.dir, "logs", "nats.log"), natsBin, nil,
		"-a", "127.0.0.1", "-p", strconv.Itoa(np), "-js", "-sd", filepath.Join(s.dir, "nats")); err != nil {
		return err
	}
	if err := s.nats.start(); err != nil {
		return err
	}
	if err := waitTCP(fmt.Sprintf("127.0.0.1:%d", np), 20*time.Second); err != nil {
		return err
	}
	rp, err := freePort()
	if err != nil {
		return err
	}
	s.relayAddr = fmt.Sprintf("127.0.0.1:%d", rp)
	if s.serve, err = newProc("serve", filepath.Join(s.dir, "logs", "serve.log"), s.tp, nil,
		"serve", "--listen", s.relayAddr, "--out", filepath.Join(s.dir, "relay")); err != nil {
		return err
	}
	if err := s.serve.start(); err != nil {
		return err
	}
	return waitTCP(s.relayAddr, 20*time.Second)
}

func (s *soak) config() string {
	small := ""
	if s.smallDir != "" {
		small = fmt.Sprintf(`
  - type: file
    name: small
    when_full: drop
    on_error: drop
    filter: 'packet.kind == "for_testing"'
    path: %s
    max_file_size: 6MiB`, filepath.Join(s.smallDir, "small.pftrace"))
	}
	return fmt.Sprintf(`# generated by tools/chaos
duration: %s
unique_session_name: %s
write_into_file: true
file_write_period: 250ms
flush_period: 1s
buffers:
  - {name: main, size_kb: 32768}
  - {name: plugin, size_kb: 16384}
  - {name: perfetto, size_kb: 8192}
producers: {smb_size_kb: 4096, plugin_smb_size_kb: 4096}
perfetto: {enabled: true, producer_socket: %s, wait_for_producers: 60s}
data_sources:
  - name: tracepipe.synthetic
    target_buffer_name: main
    buffer_exhausted_policy: stall
    config: {writers: 4, rate: %d, packet_size: 256}
  - name: tracepipe.synthetic
    plugin: %s
    target_buffer_name: plugin
    buffer_exhausted_policy: stall
    restart: {max: 100, backoff: 200ms}
    config: {writers: 2, rate: %d, packet_size: 300}
  - name: %s
    target_buffer_name: perfetto
    buffer_exhausted_policy: stall
sinks:
  - type: file
    name: reference
    path: %s
    max_file_size: 16MiB%s
  - type: relay
    name: relay
    when_full: drop
    relay: {address: %s, hostname: chaos}
  - type: nats
    name: nats
    when_full: drop
    nats: {url: %s, subject: chaos.trace, create_stream: true}
`, s.o.duration, s.name, s.sock, s.o.rate, s.plugin, s.o.plugRate, perfettoSourceName,
		filepath.Join(s.dir, "out", "ref.pftrace"), small, s.relayAddr, s.natsURL)
}

// soak runs the session with its faults and reconciles.
func (s *soak) soak() (bool, string, error) {
	s.sock = filepath.Join(s.dir, "run", "producer.sock")
	cfgPath := filepath.Join(s.dir, "chaos.yaml")
	if err := os.WriteFile(cfgPath, []byte(s.config()), 0o644); err != nil {
		return false, "", err
	}
	runtimeDir := filepath.Join(s.dir, "run")
	var err error
	s.session, err = newProc("session", filepath.Join(s.dir, "logs", "session.log"), s.tp,
		[]string{"XDG_RUNTIME_DIR=" + runtimeDir}, "run", "-c", cfgPath)
	if err != nil {
		return false, "", err
	}
	fmt.Printf("chaos: %v session, faults every %v (%s), output %s\n", s.o.duration, s.o.every, s.o.faultList, s.dir)
	start := time.Now()
	if err := s.session.start(); err != nil {
		return false, "", err
	}
	// The Perfetto double: connects once the socket is there, before
	// the session's wait_for_producers runs out.
	alive := func() bool { return syscall.Kill(s.session.pid(), 0) == nil }
	pd, err := dialProducer(s.sock, s.o.perfRate, time.Now().Add(60*time.Second), alive)
	if err != nil {
		return false, "", fmt.Errorf("%w (see %s)", err, s.session.log.Name())
	}
	served := make(chan struct{})
	go func() { defer close(served); pd.serve() }()

	ctx, cancel := context.WithCancel(context.Background())
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case <-sigc:
			s.note("interrupted: stopping the session")
			_ = s.session.cmd.Process.Signal(syscall.SIGCONT)
			_ = s.session.cmd.Process.Signal(syscall.SIGINT)
		case <-ctx.Done():
		}
	}()
	var wg sync.WaitGroup
	var samples []sample
	wg.Add(2)
	go func() { defer wg.Done(); samples = s.sampleLoop(ctx, start) }()
	go func() { defer wg.Done(); s.faultLoop(ctx, start) }()

	// The session ends on its own (duration); bound the wait.
	var sessionErr error
	select {
	case sessionErr = <-s.session.exit:
	case <-time.After(s.o.duration + 5*time.Minute):
		sessionErr = errors.New("session did not end within its duration + 5m: killed")
		_ = s.session.cmd.Process.Signal(syscall.SIGCONT)
		_ = s.session.cmd.Process.Kill()
		<-s.session.exit
	}
	s.session.cmd = nil
	cancel()
	wg.Wait()
	signal.Stop(sigc)
	select {
	case <-served:
	case <-time.After(30 * time.Second):
		s.note("the Perfetto double's connection did not end with the session")
	}
	if pd.err != nil {
		s.note("perfetto double: %v", pd.err)
	}
	s.note("session ended after %v: %v", time.Since(start).Round(time.Second), exitWord(sessionErr))
	if err := writeSamples(filepath.Join(s.dir, "rss.csv"), samples); err != nil {
		return false, "", err
	}

	// Let serve store what the relay sink sent last, then stop it.
	time.Sleep(time.Second)
	_ = s.serve.stop(syscall.SIGTERM, 30*time.Second)
	natsFiles, natsErr := s.drainNATS()
	if natsErr != nil {
		s.note("nats copy not read back: %v", natsErr)
	}
	return s.reconcile(pd, samples, sessionErr, natsFiles)
}

func exitWord(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

// drainNATS reads the subject back with `serve --from-nats` until the
// stored trace ends with a TraceStats and stops growing.
func (s *soak) drainNATS() ([]string, error) {
	out := filepath.Join(s.dir, "natsout")
	p, err := newProc("serve-nats", filepath.Join(s.dir, "logs", "serve-nats.log"), s.tp, nil,
		"serve", "--from-nats", s.natsURL, "--subject", "chaos.trace", "--durable", "chaos", "--out", out)
	if err != nil {
		return nil, err
	}
	if err := p.start(); err != nil {
		return nil, err
	}
	defer p.stop(syscall.SIGTERM, 30*time.Second)
	deadline := time.Now().Add(max(3*time.Minute, s.o.duration/3))
	var last int64 = -1
	stable := 0
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		var size int64
		for _, f := range servedFiles(out) {
			if fi, err := os.Stat(f); err == nil {
				size += fi.Size()
			}
		}
		if size > 0 && size == last {
			stable++
			if stable >= 5 {
				return servedFiles(out), nil
			}
		} else {
			stable = 0
		}
		last = size
	}
	return servedFiles(out), fmt.Errorf("still growing after %v", max(3*time.Minute, s.o.duration/3))
}

// sample is one row of rss.csv.
type sample struct {
	at                            time.Duration
	sessionRSS, serveRSS, natsRSS int64
	sessionThreads, sessionFDs    int
	plugins                       int
	faults                        int
}

func (s *soak) sampleLoop(ctx context.Context, start time.Time) []sample {
	var out []sample
	t := time.NewTicker(s.o.sample)
	defer t.Stop()
	for {
		pid := s.session.pid()
		rss, th := procStatus(pid)
		srss, _ := procStatus(s.serve.pid())
		nrss, _ := procStatus(s.nats.pid())
		s.mu.Lock()
		nf := len(s.faults)
		s.mu.Unlock()
		if pid != 0 {
			out = append(out, sample{at: time.Since(start), sessionRSS: rss, serveRSS: srss, natsRSS: nrss,
				sessionThreads: th, sessionFDs: openFDs(pid), plugins: len(childrenNamed(pid, filepath.Base(s.plugin))), faults: nf})
		}
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
		}
	}
}

func writeSamples(path string, samples []sample) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"seconds", "session_rss_bytes", "session_threads", "session_fds", "plugin_processes", "serve_rss_bytes", "nats_rss_bytes", "faults_so_far"})
	for _, x := range samples {
		_ = w.Write([]string{strconv.FormatFloat(x.at.Seconds(), 'f', 1, 64), strconv.FormatInt(x.sessionRSS, 10),
			strconv.Itoa(x.sessionThreads), strconv.Itoa(x.sessionFDs), strconv.Itoa(x.plugins),
			strconv.FormatInt(x.serveRSS, 10), strconv.FormatInt(x.natsRSS, 10), strconv.Itoa(x.faults)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func meanRSS(xs []sample, from, to time.Duration) int64 {
	var sum, n int64
	for _, x := range xs {
		if x.at >= from && x.at < to {
			sum += x.sessionRSS
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / n
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func numCPU() int { return runtime.NumCPU() }
