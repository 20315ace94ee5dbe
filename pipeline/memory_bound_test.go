package pipeline

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	ipc "github.com/tracepipe/tracepipe/perfettoipc"
)

// A session whose buffers and SMBs add up to more than its bound is
// refused by New with the figures, before anything is mapped; without a
// bound (negative) the same config is built.
func TestNewRefusesSessionOverMemoryBound(t *testing.T) {
	cfg := func() *Config {
		return loadYAML(t, fmt.Sprintf(`
buffers: [{size_kb: 65536}, {size_kb: 65536}]
data_sources:
  - {name: tracepipe.synthetic, target_buffer: 0}
  - {name: tracepipe.synthetic, target_buffer: 1}
sinks: [{type: file, path: %q}]
`, t.TempDir()+"/t.pftrace"))
	}
	c := cfg()
	buffers, smbs := c.FixedMemory()
	if buffers != 128<<20 || smbs != 2*DefaultSMBSizeKB<<10 {
		t.Fatalf("FixedMemory = %d, %d; want %d buffers and %d SMBs", buffers, smbs, 128<<20, 2*DefaultSMBSizeKB<<10)
	}
	_, err := New(c, Options{Logger: testsupport.Logger(t), MaxMemory: 100 << 20})
	if err == nil {
		t.Fatal("New built a 128.5 MiB session under a 100 MiB bound")
	}
	for _, want := range []string{"buffers:", "128.5 MiB", "100.0 MiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	s, err := New(cfg(), Options{Logger: testsupport.Logger(t), MaxMemory: -1})
	if err != nil {
		t.Fatalf("no bound: %v", err)
	}
	s.DisableBeforeStart() // release what New built, starting nothing
	if _, err := s.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Consumer sessions share one bound (any local user may connect to the
// consumer socket): a session that would take the running ones over it is
// refused, naming the figures, and what a session reserved is given back
// when it ends.
func TestPerfettoConsumersMemoryBound(t *testing.T) {
	// traceConfig: one 4 MiB buffer, a built-in source (256 KiB SMB) and,
	// read with ReadBuffers, a read queue of 2 × 4 MiB + 1 MiB: 13.25 MiB.
	pc := &PerfettoConsumers{Producers: NewPerfettoProducers(), Logger: testsupport.Logger(t), MaxMemory: 20 << 20}
	deferred := func() []byte {
		tc := traceConfig(60_000, false, "tracepipe.synthetic")
		tc = protowire.AppendTag(tc, 12, protowire.VarintType) // deferred_start
		return protowire.AppendVarint(tc, 1)
	}
	first, err := pc.EnableTracing(ipc.Peer{UID: 1000, PID: 1}, deferred(), -1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pc.EnableTracing(ipc.Peer{UID: 1000, PID: 2}, deferred(), -1)
	if err == nil {
		t.Fatal("a second 13.25 MiB session was enabled under a 20 MiB bound")
	}
	for _, want := range []string{"13.2 MiB", "running sessions hold 13.2 MiB", "20.0 MiB", "--max-consumer-memory"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	first.Disable()
	<-first.Done()
	second, err := pc.EnableTracing(ipc.Peer{UID: 1000, PID: 2}, deferred(), -1)
	if err != nil {
		t.Fatalf("after the first session ended: %v", err)
	}
	second.Disable()
	<-second.Done()
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.memInUse != 0 {
		t.Errorf("%d bytes still reserved after every session ended", pc.memInUse)
	}
}

// A consumer's producer_name_regex_filter is bounded before it is compiled
// (a 4 MB one took 6 s).
func TestConsumerRegexFilterBound(t *testing.T) {
	dsc := protowire.AppendTag(nil, 1, protowire.BytesType)
	dsc = protowire.AppendString(dsc, "tracepipe.synthetic")
	ds := protowire.AppendTag(nil, 1, protowire.BytesType)
	ds = protowire.AppendBytes(ds, dsc)
	ds = protowire.AppendTag(ds, 3, protowire.BytesType) // producer_name_regex_filter
	ds = protowire.AppendString(ds, strings.Repeat("a", maxRegexLen+1))
	tc := protowire.AppendTag(nil, 1, protowire.BytesType)
	tc = protowire.AppendBytes(tc, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1024))
	tc = protowire.AppendTag(tc, 2, protowire.BytesType)
	tc = protowire.AppendBytes(tc, ds)
	_, err := ConfigFromTraceConfig(tc)
	if err == nil || !strings.Contains(err.Error(), "producer_name_regex_filter[0]: 4097 bytes, at most 4096") {
		t.Fatalf("ConfigFromTraceConfig: %v; want the regex refused by its length", err)
	}
}
