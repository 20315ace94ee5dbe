package perfettosvc

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/config"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	ipc "github.com/tracepipe/tracepipe/perfettoipc"
)

// recipeProto is the part of Perfetto's config protos the recipe in
// docs/perfetto.md may use, with the names and numbers of
// protos/perfetto/config/{trace_config,data_source_config}.proto,
// ftrace/ftrace_config.proto, process_stats/process_stats_config.proto,
// sys_stats/sys_stats_config.proto and common/sys_stats_counters.proto at
// the golden captures' commit. A name the docs get wrong fails the parse.
const recipeProto = `
name: "recipe.proto" package: "perfetto.protos" syntax: "proto2"
message_type {
  name: "TraceConfig"
  field { name: "buffers" number: 1 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".perfetto.protos.TraceConfig.BufferConfig" }
  field { name: "data_sources" number: 2 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".perfetto.protos.TraceConfig.DataSource" }
  field { name: "duration_ms" number: 3 label: LABEL_OPTIONAL type: TYPE_UINT32 }
  nested_type {
    name: "BufferConfig"
    field { name: "size_kb" number: 1 label: LABEL_OPTIONAL type: TYPE_UINT32 }
    field { name: "fill_policy" number: 4 label: LABEL_OPTIONAL type: TYPE_ENUM type_name: ".perfetto.protos.TraceConfig.BufferConfig.FillPolicy" }
    enum_type { name: "FillPolicy" value { name: "UNSPECIFIED" number: 0 } value { name: "RING_BUFFER" number: 1 } value { name: "DISCARD" number: 2 } }
  }
  nested_type {
    name: "DataSource"
    field { name: "config" number: 1 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".perfetto.protos.DataSourceConfig" }
  }
}
message_type {
  name: "DataSourceConfig"
  field { name: "name" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING }
  field { name: "target_buffer" number: 2 label: LABEL_OPTIONAL type: TYPE_UINT32 }
  field { name: "ftrace_config" number: 100 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".perfetto.protos.FtraceConfig" }
  field { name: "process_stats_config" number: 103 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".perfetto.protos.ProcessStatsConfig" }
  field { name: "sys_stats_config" number: 104 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".perfetto.protos.SysStatsConfig" }
}
message_type {
  name: "FtraceConfig"
  field { name: "ftrace_events" number: 1 label: LABEL_REPEATED type: TYPE_STRING }
  field { name: "atrace_categories" number: 2 label: LABEL_REPEATED type: TYPE_STRING }
}
message_type {
  name: "ProcessStatsConfig"
  field { name: "scan_all_processes_on_start" number: 2 label: LABEL_OPTIONAL type: TYPE_BOOL }
  field { name: "record_thread_names" number: 3 label: LABEL_OPTIONAL type: TYPE_BOOL }
  field { name: "proc_stats_poll_ms" number: 4 label: LABEL_OPTIONAL type: TYPE_UINT32 }
}
message_type {
  name: "SysStatsConfig"
  field { name: "meminfo_period_ms" number: 1 label: LABEL_OPTIONAL type: TYPE_UINT32 }
  field { name: "meminfo_counters" number: 2 label: LABEL_REPEATED type: TYPE_ENUM type_name: ".perfetto.protos.MeminfoCounters" }
  field { name: "stat_period_ms" number: 5 label: LABEL_OPTIONAL type: TYPE_UINT32 }
  field { name: "stat_counters" number: 6 label: LABEL_REPEATED type: TYPE_ENUM type_name: ".perfetto.protos.SysStatsConfig.StatCounters" }
  enum_type { name: "StatCounters" value { name: "STAT_UNSPECIFIED" number: 0 } value { name: "STAT_CPU_TIMES" number: 1 }
    value { name: "STAT_IRQ_COUNTS" number: 2 } value { name: "STAT_SOFTIRQ_COUNTS" number: 3 } value { name: "STAT_FORK_COUNT" number: 4 } }
}
enum_type { name: "MeminfoCounters" value { name: "MEMINFO_UNSPECIFIED" number: 0 } value { name: "MEMINFO_MEM_TOTAL" number: 1 }
  value { name: "MEMINFO_MEM_FREE" number: 2 } value { name: "MEMINFO_MEM_AVAILABLE" number: 3 } }
`

// recipeConfig returns the first pbtxt block of docs/perfetto.md's
// "First example", parsed as Perfetto's TraceConfig.
func recipeConfig(t *testing.T) protoreflect.Message {
	t.Helper()
	doc, err := os.ReadFile("../docs/perfetto.md")
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(doc, []byte("\n### First example: traced_probes and the perfetto command\n"))
	if i < 0 {
		t.Fatal("docs/perfetto.md has no section \"First example: traced_probes and the perfetto command\"")
	}
	m := regexp.MustCompile("(?ms)^```pbtxt\n(.*?)^```").FindSubmatch(doc[i:])
	if m == nil {
		t.Fatal("the first example has no pbtxt block")
	}
	var fdp descriptorpb.FileDescriptorProto
	if err := prototext.Unmarshal([]byte(recipeProto), &fdp); err != nil {
		t.Fatal(err)
	}
	fd, err := protodesc.NewFile(&fdp, nil)
	if err != nil {
		t.Fatal(err)
	}
	tc := dynamicpb.NewMessage(fd.Messages().ByName("TraceConfig"))
	if err := prototext.Unmarshal(m[1], tc); err != nil {
		t.Fatalf("docs/perfetto.md's TraceConfig: %v", err)
	}
	return tc
}

// The first example of docs/perfetto.md, the traced_probes recipe: its
// config, sent by a consumer as the perfetto command sends it, makes one
// session with three instances on one producer serving the three data
// sources (as traced_probes does), each instance gets its data-source
// config byte for byte as the document writes it, and the trace holds
// every instance's packets.
func TestPerfettoDocsRecipe(t *testing.T) {
	tc := recipeConfig(t)
	tcBytes, err := proto.MarshalOptions{Deterministic: true}.Marshal(tc.Interface())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{} // data source name -> its DataSourceConfig, as the doc writes it
	dss := tc.Get(tc.Descriptor().Fields().ByName("data_sources")).List()
	for i := range dss.Len() {
		cfg := dss.Get(i).Message().Get(dss.Get(i).Message().Descriptor().Fields().ByName("config")).Message()
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(cfg.Interface())
		if err != nil {
			t.Fatal(err)
		}
		want[cfg.Get(cfg.Descriptor().Fields().ByName("name")).String()] = b
	}
	names := []string{"linux.process_stats", "linux.sys_stats", "linux.ftrace"}
	if len(want) != len(names) {
		t.Fatalf("the recipe's data sources: %d, want %v", len(want), names)
	}
	for _, n := range names {
		if len(want[n]) == 0 {
			t.Fatalf("the recipe has no %s", n)
		}
	}
	if _, err := config.ConfigFromTraceConfig(tcBytes); err != nil {
		t.Fatalf("the recipe's config: %v", err)
	}

	prodSock, consSock, reg := perfettoService(t)
	const per = 100
	md := dialMulti(t, prodSock, per, append([]string{"linux.system_info"}, names...)...)
	defer md.close()
	served := make(chan error, 1)
	go md.serve(served)
	defer func() {
		md.close()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()
	c := dialConsumer(t, consSock)
	defer c.pd.close()
	// The recipe records 10 s; the same config with duration_ms 300 (the
	// last value of a field wins) keeps the test short.
	short := protowire.AppendTag(append([]byte(nil), tcBytes...), 3, protowire.VarintType)
	short = protowire.AppendVarint(short, 300)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if missing := reg.WaitFor(ctx, names); len(missing) > 0 {
		t.Fatalf("never registered: %v", missing)
	}
	enable := c.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: short}, false)
	if r := c.reply(enable); !r.GetSuccess() {
		t.Fatalf("EnableTracing reply %v", r)
	}
	pkts := c.readAll()

	md.mu.Lock()
	cfgs := md.cfgs
	md.mu.Unlock()
	if len(cfgs) != len(names) {
		t.Fatalf("%d instances set up, want %d (one per data source of the recipe)", len(cfgs), len(names))
	}
	got := map[uint64]int{}
	for _, p := range pkts {
		if id, _, ok := parseShared(p); ok {
			got[id]++
		}
	}
	for id, dsc := range cfgs {
		raw, err := proto.Marshal(dsc)
		if err != nil {
			t.Fatal(err)
		}
		name := dsc.GetName()
		for _, f := range []protowire.Number{100, 103, 104} {
			if w, g := subMessage(want[name], f), subMessage(raw, f); !bytes.Equal(w, g) {
				t.Errorf("%s (instance %d): field %d is %x at the producer, %x in the doc", name, id, f, g, w)
			}
		}
		if got[id] != per {
			t.Errorf("%s (instance %d): %d of %d packets in the trace", name, id, got[id], per)
		}
	}
}

// subMessage returns the payload of field num in message b (nil if none).
func subMessage(b []byte, num protowire.Number) []byte {
	var out []byte
	_ = walkProto(b, func(n protowire.Number, _ uint64, p []byte) error {
		if n == num {
			out = p
		}
		return nil
	})
	return out
}
