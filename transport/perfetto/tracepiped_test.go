package perfetto

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/perfettotest"
	ipc "github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/tracefile"
)

// Issue 27's workload with every process apart, as the side-by-side with
// the real traced runs it, but without Perfetto's binaries: tracepiped
// (cmd/tracepiped, built as `make tracepiped` builds it) serves the producer double
// of bench_test.go (a child process, posted commits) and a consumer that
// streams one 64 MiB ring into a file on tmpfs every 100 ms, as the
// perfetto command does with write_into_file. tracepiped is a process of
// its own, so its peak RSS (VmHWM) and CPU time are its alone.

// ringKB is the session's one ring buffer, as in the issue.
const ringKB = 64 << 10

// smbBytes is what tracepiped gives each producer by default (traced's
// default SMB size).
const smbBytes = 256 << 10

// buildTracepiped builds cmd/tracepiped as `make tracepiped` does: static
// (CGO_ENABLED=0), without libc's pages (about 1.5 MiB resident).
func buildTracepiped(tb testing.TB) string {
	return testsupport.BuildBinary(tb, "../../cmd/tracepiped", "CGO_ENABLED=0")
}

// tracepipedRun is what one session measured.
type tracepipedRun struct {
	CPU        time.Duration // tracepiped's user + system time, start to end
	Written    int64         // bytes in the output file
	Packets    int           // packets in it
	Peak       int64         // tracepiped's VmHWM
	Anon, File int64         // its resident split when VmHWM last grew
	Producer   benchProducerReport
}

// streamingConfig is the consumer's TraceConfig: one ring of ringKB, the
// producer double's data source, write_into_file every 100 ms.
func streamingConfig(durationMs uint64) []byte {
	buf := protowire.AppendTag(nil, 1, protowire.VarintType) // size_kb
	buf = protowire.AppendVarint(buf, ringKB)
	buf = protowire.AppendTag(buf, 4, protowire.VarintType) // fill_policy
	buf = protowire.AppendVarint(buf, 1)                    // RING_BUFFER
	b := protowire.AppendTag(nil, 1, protowire.BytesType)   // buffers
	b = protowire.AppendBytes(b, buf)
	dsc := protowire.AppendTag(nil, 1, protowire.BytesType) // DataSourceConfig.name
	dsc = protowire.AppendString(dsc, "bench.producer")
	ds := protowire.AppendTag(nil, 1, protowire.BytesType) // DataSource.config
	ds = protowire.AppendBytes(ds, dsc)
	b = protowire.AppendTag(b, 2, protowire.BytesType) // data_sources
	b = protowire.AppendBytes(b, ds)
	b = protowire.AppendTag(b, 3, protowire.VarintType) // duration_ms
	b = protowire.AppendVarint(b, durationMs)
	b = protowire.AppendTag(b, 8, protowire.VarintType) // write_into_file
	b = protowire.AppendVarint(b, 1)
	b = protowire.AppendTag(b, 9, protowire.VarintType) // file_write_period_ms
	b = protowire.AppendVarint(b, 100)
	return b
}

// runTracepiped runs one streaming session through the tracepiped binary
// bin: the producer double (size-byte packets, writers threads) writes as
// fast as it can for dur, or, with dur 0, until the file holds minBytes
// (the consumer then disables the session, within deadline).
func runTracepiped(tb testing.TB, bin string, size, writers int, dur time.Duration, minBytes int64, deadline time.Duration) (r tracepipedRun) {
	tb.Helper()
	dir := tb.TempDir()
	prodSock, consSock := filepath.Join(dir, "p.sock"), filepath.Join(dir, "c.sock")
	svc := exec.Command(bin)
	svc.Env = append(os.Environ(), "PERFETTO_PRODUCER_SOCK_NAME="+prodSock, "PERFETTO_CONSUMER_SOCK_NAME="+consSock)
	var svcErr testsupport.LockedBuffer
	svc.Stderr = &svcErr
	if err := svc.Start(); err != nil {
		tb.Fatal(err)
	}
	svcDone := make(chan error, 1)
	go func() { svcDone <- svc.Wait() }()
	defer func() {
		_ = svc.Process.Kill()
		<-svcDone
	}()
	var c *perfettotest.Consumer
	testsupport.WaitUntil(tb, "tracepiped's consumer socket", 10*time.Second, func() bool {
		var err error
		c, err = perfettotest.Dial(consSock, 10*time.Second)
		return err == nil
	})
	defer c.Close()

	prod, prodOut := startBenchProducer(tb, benchProducerArgs{Socket: prodSock, Writers: writers, Size: size, Posted: true})
	prodDone := make(chan error, 1)
	go func() { prodDone <- prod.Wait() }()
	defer func() {
		_ = prod.Process.Kill()
		<-prodDone
	}()

	// The producer registers before the session starts, as the issue's
	// producer runs before the perfetto command: a session that starts
	// first would count the connection's time as no data.
	testsupport.WaitUntil(tb, "the producer's data source", 30*time.Second, func() bool {
		rid, err := c.Invoke("QueryServiceState", &ipc.QueryServiceStateRequest{}, -1)
		if err != nil {
			tb.Fatal(err)
		}
		rep, err := c.Reply(rid, time.Now().Add(10*time.Second))
		if err != nil {
			tb.Fatal(err)
		}
		return strings.Contains(string(rep.GetReplyProto()), "bench.producer")
	})

	outDir := os.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		outDir = "/dev/shm" // the runs stream into tmpfs
	}
	out, err := os.CreateTemp(outDir, "tracepiped-*.pftrace")
	if err != nil {
		tb.Fatal(err)
	}
	defer os.Remove(out.Name())
	defer out.Close()

	cpu0, _ := testsupport.CPUTime(svc.Process.Pid)
	durMs := uint64(dur / time.Millisecond)
	if dur == 0 {
		durMs = uint64(deadline / time.Millisecond)
	}
	enable, err := c.Invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: streamingConfig(durMs)}, int(out.Fd()))
	if err != nil {
		tb.Fatal(err)
	}
	// Sample the peak while the session runs; stop it at minBytes.
	end := time.Now().Add(deadline)
	disabled := false
	ended := make(chan *ipc.Frame_InvokeMethodReply, 1)
	replyErr := make(chan error, 1)
	go func() {
		rep, err := c.Reply(enable, end.Add(time.Minute))
		if err != nil {
			replyErr <- err
			return
		}
		ended <- rep
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	sample := func() {
		if hwm := testsupport.VmHWM(svc.Process.Pid); hwm > r.Peak {
			r.Peak = hwm
			if anon, rss, ok := testsupport.ResidentSplit(svc.Process.Pid); ok {
				r.Anon, r.File = anon, rss-anon
			}
		}
	}
wait:
	for {
		select {
		case rep := <-ended:
			var er ipc.EnableTracingResponse
			if err := proto.Unmarshal(rep.GetReplyProto(), &er); err != nil || !rep.GetSuccess() || er.GetError() != "" {
				tb.Fatalf("EnableTracing reply %v %v (%v); tracepiped: %s", rep, &er, err, svcErr.String())
			}
			break wait
		case err := <-replyErr:
			tb.Fatalf("%v; tracepiped: %s", err, svcErr.String())
		case <-tick.C:
			sample()
			if dur == 0 && !disabled {
				if st, err := out.Stat(); err == nil && st.Size() >= minBytes {
					// The reply to EnableTracing is the session's end: this
					// request's own reply is not awaited.
					if _, err := c.Invoke("DisableTracing", &ipc.DisableTracingRequest{}, -1); err != nil {
						tb.Fatal(err)
					}
					disabled = true
				} else if time.Now().After(end) {
					tb.Fatalf("the file held %d bytes after %v, not %d; tracepiped: %s", st.Size(), deadline, minBytes, svcErr.String())
				}
			}
		}
	}
	sample()
	cpu1, ok := testsupport.CPUTime(svc.Process.Pid)
	if !ok {
		tb.Fatalf("tracepiped exited: %s", svcErr.String())
	}
	r.CPU = cpu1 - cpu0

	// Its end closes the producer's connection; the producer reports.
	_ = svc.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-prodDone:
		prodDone <- err // for the deferred Wait
		if err != nil {
			tb.Fatalf("producer: %v", err)
		}
	case <-time.After(time.Minute):
		tb.Fatal("the producer did not exit within a minute of tracepiped's end")
	}
	if err := json.Unmarshal([]byte(prodOut.String()), &r.Producer); err != nil {
		tb.Fatalf("producer report %q: %v", prodOut.String(), err)
	}
	st, err := out.Stat()
	if err != nil {
		tb.Fatal(err)
	}
	r.Written = st.Size()
	if err := tracefile.ReadFile(out.Name(), tracefile.ReaderOptions{}, nil, func(tracefile.Record) error { r.Packets++; return nil }); err != nil {
		tb.Fatalf("reading the trace: %v", err)
	}
	return r
}

// The regression guard of issue 27 for the Perfetto service: tracepiped's
// peak RSS stays within its session's buffer and SMB plus a generous
// margin once the ring has been written through twice. It measured 78–79
// MiB for 64.25 MiB (the target: +16 MiB); the tight figure is
// BenchmarkTracepipedProducerPath's.
func TestTracepipedPeakRSSWithinBuffers(t *testing.T) {
	bin := buildTracepiped(t)
	r := runTracepiped(t, bin, 1024, 1, 0, 2*ringKB<<10, 2*time.Minute)
	const budget = ringKB<<10 + smbBytes
	t.Logf("peak RSS %.1f MiB (%.1f MiB anonymous, %.1f MiB file-backed) for %.2f MiB of buffers and SMBs; %.0f MiB written, %d packets",
		float64(r.Peak)/(1<<20), float64(r.Anon)/(1<<20), float64(r.File)/(1<<20), float64(budget)/(1<<20), float64(r.Written)/(1<<20), r.Packets)
	if r.Written < 2*ringKB<<10 || r.Packets == 0 {
		t.Fatalf("only %d bytes (%d packets) written: the ring was not filled, the measure means nothing", r.Written, r.Packets)
	}
	if r.Peak < ringKB<<10 {
		t.Fatalf("peak RSS %d bytes is below the ring's size: the ring was not resident, the measure means nothing", r.Peak)
	}
	if limit := int64(budget + 32<<20); r.Peak > limit {
		t.Fatalf("peak RSS %d bytes > buffers + SMBs + 32 MiB = %d", r.Peak, limit)
	}
}

// BenchmarkTracepipedProducerPath reports, per 3 s session through the
// tracepiped binary: its CPU seconds per GB written, the delivered share
// of the packets the producer tried to write, its peak RSS and how far
// that is above the buffer and SMB (issue 27's target: 16 MiB). Run it
// with -benchtime 1x and -count for medians.
func BenchmarkTracepipedProducerPath(b *testing.B) {
	bin := buildTracepiped(b)
	for _, size := range []int{200, 1024} {
		for _, writers := range []int{1, 2} {
			b.Run(fmt.Sprintf("size=%d/writers=%d", size, writers), func(b *testing.B) {
				var cpu, gb, delivered, emitted, peak, anon, file float64
				for b.Loop() {
					r := runTracepiped(b, bin, size, writers, 3*time.Second, 0, 2*time.Minute)
					cpu += r.CPU.Seconds()
					gb += float64(r.Written) / 1e9
					delivered += float64(r.Packets)
					emitted += float64(r.Producer.Attempted)
					if p := float64(r.Peak) / (1 << 20); p > peak {
						peak, anon, file = p, float64(r.Anon)/(1<<20), float64(r.File)/(1<<20)
					}
				}
				b.ReportMetric(cpu/gb, "service-CPU-s/GB")
				b.ReportMetric(100*delivered/emitted, "delivered-%")
				b.ReportMetric(peak, "peak-RSS-MiB")
				b.ReportMetric(peak-float64(ringKB<<10+smbBytes)/(1<<20), "MiB-over-buffers+SMBs")
				b.ReportMetric(anon, "anon-MiB")
				b.ReportMetric(file, "file-backed-MiB")
			})
		}
	}
}
