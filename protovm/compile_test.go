package protovm

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// testFiles builds the test messages of Perfetto's compiler_unittest.cc.
func testFiles(t testing.TB) *protoregistry.Files {
	t.Helper()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED
	fld := func(name string, num int32, label descriptorpb.FieldDescriptorProto_Label, typ descriptorpb.FieldDescriptorProto_Type, msg string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(num), Label: &label, Type: &typ}
		if msg != "" {
			f.TypeName = proto.String(".perfetto.protos." + msg)
		}
		return f
	}
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING
	i32 := descriptorpb.FieldDescriptorProto_TYPE_INT32
	msg := descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	file := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("protovm_test.proto"),
		Package: proto.String("perfetto.protos"),
		Syntax:  proto.String("proto2"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("ProtoVmMessage"), Field: []*descriptorpb.FieldDescriptorProto{
				fld("id", 1, opt, i32, ""), fld("submessage", 2, opt, msg, "ProtoVmMessage")}},
			{Name: proto.String("ProtoVmPatch"), Field: []*descriptorpb.FieldDescriptorProto{
				fld("string_to_merge", 1, opt, str, ""), fld("int_to_merge", 2, opt, i32, ""),
				fld("single_message", 3, opt, msg, "ProtoVmMessage"), fld("messages", 4, rep, msg, "ProtoVmMessage"),
				fld("delete_message_ids", 5, rep, i32, "")}},
			{Name: proto.String("ProtoVmIncrementalState"), Field: []*descriptorpb.FieldDescriptorProto{
				fld("string_merged", 1, opt, str, ""), fld("int_merged", 2, opt, i32, ""),
				fld("single_message", 3, opt, msg, "ProtoVmMessage"), fld("messages", 4, rep, msg, "ProtoVmMessage")}},
			{Name: proto.String("TestEvent"), Field: []*descriptorpb.FieldDescriptorProto{
				fld("protovm_patch", 6, opt, msg, "ProtoVmPatch"), fld("protovm_incremental_state", 7, opt, msg, "ProtoVmIncrementalState")}},
			{Name: proto.String("TracePacket"), Field: []*descriptorpb.FieldDescriptorProto{
				fld("for_testing", 900, opt, msg, "TestEvent")}},
		},
	}
	set := &descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{file}}
	b, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	files, err := LoadDescriptorSet(b)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// Program-building helpers mirroring the notation of protovm.md §8.2.
func path(ids ...uint32) []PathComponent {
	var p []PathComponent
	for _, id := range ids {
		p = append(p, PathComponent{HasFieldID: true, FieldID: id})
	}
	return p
}

func rep(p []PathComponent) []PathComponent {
	p[len(p)-1].HasIsRepeated, p[len(p)-1].IsRepeated = true, true
	return p
}

func key(p []PathComponent, k uint32) []PathComponent {
	return append(p, PathComponent{HasMapKeyFieldID: true, MapKeyFieldID: k, HasRegisterToMatch: true})
}

func src(p []PathComponent, nested ...Instruction) Instruction {
	return Instruction{Select: &Select{Path: p}, Nested: nested}
}

func dst(create bool, p []PathComponent, nested ...Instruction) Instruction {
	s := &Select{HasCursor: true, Cursor: CursorDst, Path: p}
	if create {
		s.HasCreateIfNotExist, s.CreateIfNotExist = true, true
	}
	return Instruction{Select: s, Nested: nested}
}

func lvl(l int32, ins Instruction) Instruction {
	ins.HasAbortLevel, ins.AbortLevel = true, l
	return ins
}

var (
	opSet    = Instruction{Set: true}
	opDel    = Instruction{Del: true}
	opRegR0  = Instruction{RegLoad: &RegLoad{HasDstRegister: true}}
	opMerge  = Instruction{Merge: &Merge{HasDelIfSrcEmpty: true, DelIfSrcEmpty: true}}
	opMergeR = Instruction{Merge: &Merge{HasSkipSubmessages: true, SkipSubmessages: true, HasDelIfSrcEmpty: true, DelIfSrcEmpty: true}}
)

// TestCompileReferencePrograms reproduces the compiler goldens of Perfetto's
// compiler_unittest.cc (protovm.md §8.2) from YAML with names.
func TestProtoVMCompileReferencePrograms(t *testing.T) {
	files := testFiles(t)
	head := "root_message: perfetto.protos.TracePacket\ncommands:\n"
	for _, tc := range []struct {
		name, yaml string
		want       Instruction
	}{
		{"set", `  - set: {src: [for_testing, protovm_patch, string_to_merge], dst: [for_testing, protovm_incremental_state, string_merged]}
    abort_level: ABORT`,
			lvl(3, src(path(900, 6, 1), dst(true, path(900, 7, 1), opSet)))},
		{"del if_src_present", `  - del: {src: [for_testing, protovm_patch, single_message], dst: [for_testing, protovm_incremental_state], if_src_present: true}
    abort_level: ABORT`,
			lvl(3, src(path(900, 6, 3), dst(false, path(900, 7), opDel)))},
		{"del key", `  - del: {src: [for_testing, protovm_patch, delete_message_ids], dst: [for_testing, protovm_incremental_state, messages], dst_key_field: id}
    abort_level: ABORT`,
			lvl(3, src(rep(path(900, 6, 5)), opRegR0, dst(false, key(path(900, 7, 4), 1), opDel)))},
		{"merge", `  - merge: {src: [for_testing, protovm_patch, single_message], dst: [for_testing, protovm_incremental_state, single_message]}
    abort_level: ABORT`,
			lvl(3, src(path(900, 6, 3), dst(true, path(900, 7, 3), opMerge)))},
		{"merge recursive", `  - merge: {src: [for_testing, protovm_patch, single_message], dst: [for_testing, protovm_incremental_state, single_message], recursive: true}
    abort_level: ABORT`,
			lvl(3, src(path(900, 6, 3), dst(true, path(900, 7, 3),
				lvl(1, src(path(2), dst(true, path(2), opMergeR))), opMergeR)))},
		{"merge key", `  - merge: {src: [for_testing, protovm_patch, messages], dst: [for_testing, protovm_incremental_state, messages], key_field: id}
    abort_level: ABORT`,
			lvl(3, src(rep(path(900, 6, 4)), lvl(3, src(path(1), opRegR0)), dst(true, key(path(900, 7, 4), 1), opMerge)))},
		{"enter_scope", `  - enter_scope:
      src: [for_testing, protovm_patch]
      dst: [for_testing, protovm_incremental_state]
      commands:
        - set: {}
    abort_level: ABORT`,
			lvl(3, src(path(900, 6), dst(true, path(900, 7), opSet)))},
	} {
		got, err := Compile([]byte(head+tc.yaml+"\n"), files)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want := (&Program{Instructions: []Instruction{tc.want}}).Marshal()
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %x\nwant %x", tc.name, got, want)
		}
	}
	// A set with empty paths is a bare set.
	got, err := Compile([]byte("commands:\n  - set: {}\n"), nil)
	if err != nil || !bytes.Equal(got, (&Program{Instructions: []Instruction{opSet}}).Marshal()) {
		t.Fatalf("bare set: %x %v", got, err)
	}
}

func TestProtoVMCompileErrors(t *testing.T) {
	files := testFiles(t)
	for _, tc := range []struct{ yaml, want string }{
		{"root_message: perfetto.protos.TracePacket\ncommands:\n  - set: {src: [for_testing, nope], dst: []}\n", "commands[0].set.src[1]: Failed to lookup field name: nope"},
		{"commands:\n  - set: {src: [a], dst: [1]}\n", "commands[0].set.src[0]"},
		{"commands:\n  - del: {src: [1], dst: [2]}\n", "commands[0].del: exactly one of"},
		{"commands:\n  - set: {}\n    merge: {}\n", "commands[0]: a command needs exactly one"},
		{"instructions:\n  - select: {path: [1]}\n    nested:\n      - reg_load: {register: 40}\n", "instructions[0].nested[0].reg_load.register"},
		{"instructions:\n  - set: {}\n    abort_level: SOMETIMES\n", "instructions[0].abort_level"},
		{"instructions:\n  - frobnicate: {}\n", "document"},
		{"root_message: perfetto.protos.Nope\n", "root_message"},
		{"root_message: perfetto.protos.TracePacket\ncommands:\n  - merge: {src: [for_testing, protovm_patch], dst: [for_testing, protovm_incremental_state], recursive: true}\n", "identical src and dst"},
	} {
		_, err := Compile([]byte(tc.yaml), files)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
