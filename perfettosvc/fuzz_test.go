package perfettosvc

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/tracepipe/tracepipe/config"

	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	ipc "github.com/tracepipe/tracepipe/perfettoipc"
)

// FuzzConfigFromTraceConfig maps any bytes as a consumer's TraceConfig
// (seeded with the perfetto command's configs from the captures): a clear
// error or a config that validated, never a panic.
func FuzzConfigFromTraceConfig(f *testing.F) {
	root := testsupport.GoldenDir(f, "perfetto-ipc")
	paths, _ := filepath.Glob(filepath.Join(root, "*", "consumer.conn*.c2s.frames.bin"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		payloads, _, err := ipc.SplitFrames(b)
		if err != nil {
			f.Fatal(err)
		}
		for _, pl := range payloads {
			var fr ipc.Frame
			var req ipc.EnableTracingRequest
			if proto.Unmarshal(pl, &fr) == nil && fr.GetMsgInvokeMethod().GetMethodId() == 1 &&
				proto.Unmarshal(fr.GetMsgInvokeMethod().GetArgsProto(), &req) == nil && req.TraceConfig != nil {
				f.Add(req.GetTraceConfig())
			}
		}
	}
	// trigger_config and producer_name_regex_filter.
	f.Add(withTriggerConfig(filteredConfig(2000, "p"), 2, 1000, trig{"t", 5}))
	f.Add(append(filteredConfig(2000), 0x12, 0x05, 0x1a, 0x03, 'a', '.', '*'))
	// activate_triggers, alone and beside a session; CLONE_SNAPSHOT with
	// its timeout as the duration.
	f.Add(appendActivateTriggers(nil, "x", "y"))
	f.Add(appendActivateTriggers(traceConfig(1000, false, "tracepipe.synthetic"), "x"))
	f.Add(withTriggerConfig(traceConfig(0, false, "tracepipe.synthetic"), 4, 5000, trig{"snap", 0}))
	f.Fuzz(func(t *testing.T, tc []byte) {
		cfg, err := config.ConfigFromTraceConfig(tc)
		if err == nil && (len(cfg.Buffers) == 0 || !cfg.Perfetto.Enabled) {
			t.Fatalf("accepted a config without buffers: %+v", cfg)
		}
		if err == nil {
			_ = cfg.Warnings() // names activate_triggers, bounded
		}
	})
}

// FuzzWithoutProducerFilters strips the producer_name_filters of any
// bytes as a consumer's ChangeTraceConfig (seeded with a filtered config
// and the captures' configs): an error or a TraceConfig without filters,
// which stripping again leaves as it is; never a panic.
func FuzzWithoutProducerFilters(f *testing.F) {
	f.Add(filteredConfig(2000, "double-a", "double-b"))
	f.Add(traceConfig(2000, true, "linux.sys_stats"))
	f.Fuzz(func(t *testing.T, tc []byte) {
		out, err := withoutProducerFilters(tc)
		if err != nil {
			return
		}
		again, err := withoutProducerFilters(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("stripping twice: %x then %x (%v)", out, again, err)
		}
	})
}
