package pipeline

import (
	"testing"

	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// testEventType is Perfetto's TestEvent (protos/perfetto/trace/test_event.proto,
// proto2) as far as the example plugin uses it: str = 1 (string),
// seq_value = 2 (uint32), counter = 3 (uint64).
func testEventType(t *testing.T) protoreflect.MessageType {
	t.Helper()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
	field := func(name string, num int32, typ descriptorpb.FieldDescriptorProto_Type) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(num), Label: &opt, Type: &typ}
	}
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:    proto.String("test_event.proto"),
		Package: proto.String("perfetto.protos"),
		Syntax:  proto.String("proto2"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("TestEvent"),
			Field: []*descriptorpb.FieldDescriptorProto{
				field("str", 1, descriptorpb.FieldDescriptorProto_TYPE_STRING),
				field("seq_value", 2, descriptorpb.FieldDescriptorProto_TYPE_UINT32),
				field("counter", 3, descriptorpb.FieldDescriptorProto_TYPE_UINT64),
			},
		}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return dynamicpb.NewMessageType(fd.Messages().Get(0))
}

// strictTestEvent decodes a for_testing payload as a TestEvent the way a
// strict decoder does: it must parse, with no unknown fields, and str must
// be valid UTF-8 text.
func strictTestEvent(t *testing.T, mt protoreflect.MessageType, b []byte) (seq uint32) {
	t.Helper()
	m := mt.New().Interface()
	if err := (proto.UnmarshalOptions{}).Unmarshal(b, m); err != nil {
		t.Fatalf("for_testing is not a TestEvent: %v", err)
	}
	r := m.ProtoReflect()
	if len(r.GetUnknown()) != 0 {
		t.Fatalf("TestEvent with unknown fields %x", r.GetUnknown())
	}
	d := r.Descriptor().Fields()
	if _, err := proto.Marshal(m); err != nil { // checks str is UTF-8
		t.Fatalf("TestEvent does not re-encode: %v", err)
	}
	return uint32(r.Get(d.ByName("seq_value")).Uint())
}

// The example plugin's packets carry a valid TestEvent (issue 13: strict
// decoders rejected the whole trace).
func TestExamplePluginTestEventIsStrict(t *testing.T) {
	mt := testEventType(t)
	plugin := counterPlugin(t)
	out := t.TempDir() + "/strict.pftrace"
	runSession(t, cfgtest.LoadYAML(t, `
duration: 0s
buffers: [{size_kb: 1024}]
data_sources:
  - name: example.counter
    plugin: `+plugin+`
    buffer_exhausted_policy: stall
    config: {packets: 50, size: 10}
sinks: [{type: file, path: `+out+`}]
`))
	n := 0
	for _, p := range tracetest.ReadTrace(t, out) {
		ev, ok := bytesField(p.Raw, 900)
		if !ok {
			continue
		}
		if seq := strictTestEvent(t, mt, ev); seq != uint32(n) {
			t.Fatalf("seq_value %d, want %d", seq, n)
		}
		n++
	}
	if n != 50 {
		t.Fatalf("%d TestEvents, want 50", n)
	}
}
