package pipeline

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
)

// A session whose buffers and SMBs add up to more than its bound is
// refused by New with the figures, before anything is mapped; without a
// bound (negative) the same config is built.
func TestNewRefusesSessionOverMemoryBound(t *testing.T) {
	cfg := func() *config.Config {
		return cfgtest.LoadYAML(t, fmt.Sprintf(`
buffers: [{size_kb: 65536}, {size_kb: 65536}]
data_sources:
  - {name: tracepipe.synthetic, target_buffer: 0}
  - {name: tracepipe.synthetic, target_buffer: 1}
sinks: [{type: file, path: %q}]
`, t.TempDir()+"/t.pftrace"))
	}
	c := cfg()
	buffers, smbs := c.FixedMemory()
	if buffers != 128<<20 || smbs != 2*config.DefaultSMBSizeKB<<10 {
		t.Fatalf("FixedMemory = %d, %d; want %d buffers and %d SMBs", buffers, smbs, 128<<20, 2*config.DefaultSMBSizeKB<<10)
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

// A consumer's producer_name_regex_filter is bounded before it is compiled
// (a 4 MB one took 6 s).
func TestConsumerRegexFilterBound(t *testing.T) {
	dsc := protowire.AppendTag(nil, 1, protowire.BytesType)
	dsc = protowire.AppendString(dsc, "tracepipe.synthetic")
	ds := protowire.AppendTag(nil, 1, protowire.BytesType)
	ds = protowire.AppendBytes(ds, dsc)
	ds = protowire.AppendTag(ds, 3, protowire.BytesType) // producer_name_regex_filter
	ds = protowire.AppendString(ds, strings.Repeat("a", config.MaxRegexLen+1))
	tc := protowire.AppendTag(nil, 1, protowire.BytesType)
	tc = protowire.AppendBytes(tc, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1024))
	tc = protowire.AppendTag(tc, 2, protowire.BytesType)
	tc = protowire.AppendBytes(tc, ds)
	_, err := config.ConfigFromTraceConfig(tc)
	if err == nil || !strings.Contains(err.Error(), "producer_name_regex_filter[0]: 4097 bytes, at most 4096") {
		t.Fatalf("ConfigFromTraceConfig: %v; want the regex refused by its length", err)
	}
}
