package main

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	ipc "github.com/tracepipe/tracepipe/perfettoipc"
)

// serve --perfetto --metrics-addr reports each running consumer session
// on /metrics as run reports its one, labelled with its tracing session
// id: its memory by component among the rest.
func TestServePerfettoMetricsShowSessions(t *testing.T) {
	sp := startServePerfetto(t, "--metrics-addr", "127.0.0.1:0")
	c, stderr := sp.conn, sp.stderr
	addrRE := regexp.MustCompile(`metrics on (http://\S+/metrics)`)
	var url string
	testsupport.WaitUntil(t, "the metrics address in the log", 10*time.Second, func() bool {
		if m := addrRE.FindStringSubmatch(stderr.String()); m != nil {
			url = m[1]
		}
		return url != ""
	})
	// Bind the ConsumerPort, then EnableTracing: one 4 MiB buffer, the
	// built-in synthetic source, a minute (the test ends it first).
	send := func(f *ipc.Frame) {
		b, _ := ipc.AppendFrame(nil, f)
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	f := sp.bindConsumerPort(t)
	var enable uint32
	for _, m := range f.GetMsgBindServiceReply().GetMethods() {
		if m.GetName() == "EnableTracing" {
			enable = m.GetId()
		}
	}
	bufCfg := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 4096) // size_kb
	dsCfg := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "tracepipe.synthetic")
	ds := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), dsCfg)
	tc := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), bufCfg)
	tc = protowire.AppendBytes(protowire.AppendTag(tc, 2, protowire.BytesType), ds)
	tc = protowire.AppendVarint(protowire.AppendTag(tc, 3, protowire.VarintType), 60_000) // duration_ms
	args, _ := proto.Marshal(&ipc.EnableTracingRequest{TraceConfig: tc})
	send(&ipc.Frame{RequestId: proto.Uint64(2), Msg: &ipc.Frame_MsgInvokeMethod{MsgInvokeMethod: &ipc.Frame_InvokeMethod{
		ServiceId: proto.Uint32(1), MethodId: proto.Uint32(enable), ArgsProto: args}}})

	memRE := regexp.MustCompile(`tracepipe_session_memory_bytes\{component="(\w+)",session="\d+"\} (\S+)`)
	var body string
	testsupport.WaitUntil(t, "the session's memory on /metrics", 20*time.Second, func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		got := map[string]string{}
		for _, m := range memRE.FindAllStringSubmatch(body, -1) {
			got[m[1]] = m[2]
		}
		return got["buffers"] == "4.194304e+06" && got["batches"] != "" && got["batches"] != "0"
	})
	if !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics lacks the Go runtime's metrics:\n%s", body)
	}
	c.Close() // the consumer went away: its session ends
	if got := sp.stop(); got != exitOK {
		t.Fatalf("exit %d, stderr %q", got, stderr.String())
	}
}
