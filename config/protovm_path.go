package config

import (
	"fmt"

	"github.com/tracepipe/tracepipe/internal/wire"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/protovm"
	"github.com/tracepipe/tracepipe/tracefile"
)

// This file decides which path a data source's ProtoVM program serves
// (ProtoVMConfig.Path) and refuses, at config load, a program that would
// destroy events on the "perfetto" path: trace_processor applies every
// packet of a registered sequence to the VM and replaces each packet whose
// patch returns Ok by the VM's state (trace-processor-import.md §5), so a
// program that returns Ok for a packet carrying an event makes that event
// vanish from the imported trace.

// resolveProtoVMPath sets vm.Path from the config or from what the YAML
// program declares (src, nil for compiled programs), and checks a
// "perfetto" program against the probe packets.
func resolveProtoVMPath(k *checker, p string, vm *ProtoVMConfig, src []byte) {
	declared := ""
	if src != nil {
		d, err := protovm.Serves(src)
		if err != nil {
			k.bad(p+".program", "%q: %v", vm.Program, err)
			return
		}
		declared = d
	}
	switch vm.Path {
	case "":
		vm.Path = declared
		if vm.Path == "" {
			vm.Path = ProtoVMPathRestore
		}
	case ProtoVMPathRestore, ProtoVMPathPerfetto:
		if declared != "" && declared != vm.Path {
			k.bad(p+".path", "%s, but program %q declares serves: %s", vm.Path, vm.Program, declared)
			return
		}
	default:
		k.bad(p+".path", "%q: want %s or %s", vm.Path, ProtoVMPathRestore, ProtoVMPathPerfetto)
		return
	}
	if vm.Path == ProtoVMPathPerfetto {
		if err := checkReplacementSafe(vm.ProgramBytes, int(vm.MemoryLimitKB)*1024); err != nil {
			k.bad(p+".path", "perfetto: program %q: %v", vm.Program, err)
		}
	}
}

// replacementProbe is a packet a "perfetto" program must return Error (or
// Abort) for.
type replacementProbe struct {
	name   string
	packet []byte
}

// replacementProbes are event packets shaped like what producers write:
// each carries a payload and, SDK style, the interned data and defaults it
// uses, with every common InternedData entry kind, so a program keyed on
// interned data or on the payload returns Ok for at least one of them.
func replacementProbes() []replacementProbe {
	entry := func(b []byte, field protowire.Number, iid uint64, name string) []byte {
		return wire.AppendBytes(b, field, wire.AppendString(wire.AppendVarint(nil, 1, iid), 2, name))
	}
	var interned []byte
	interned = entry(interned, 1, 1, "cat")  // event_categories
	interned = entry(interned, 2, 1, "name") // event_names
	interned = entry(interned, 3, 1, "arg")  // debug_annotation_names
	interned = entry(interned, 4, 1, "file") // source_locations
	defaults := wire.AppendVarint(nil, tracefile.FieldTimestampClockID, 6)
	msg := func(fields ...any) []byte {
		var b []byte
		for i := 0; i < len(fields); i += 2 {
			num := protowire.Number(fields[i].(int))
			switch v := fields[i+1].(type) {
			case int:
				b = wire.AppendVarint(b, num, uint64(v))
			case []byte:
				b = wire.AppendBytes(b, num, v)
			}
		}
		return b
	}
	event := func(payloadField int, payload []byte) []byte {
		return msg(tracefile.FieldTimestamp, 1000, tracefile.FieldSequenceFlags, 3,
			tracefile.FieldInternedData, interned, tracefile.FieldTracePacketDefaults, defaults,
			payloadField, payload)
	}
	slice := msg(9, 1, 11, 100, 10, 1, 3, 1, 4, msg(10, 1, 4, 7)) // type BEGIN, track_uuid, name_iid, category_iids, debug annotation
	counter := msg(9, 4, 11, 101, 30, 42)
	return []replacementProbe{
		{"track_event slice with interned_data (SDK style)", event(tracefile.FieldTrackEvent, slice)},
		{"track_event counter", event(tracefile.FieldTrackEvent, counter)},
		{"track_descriptor", event(tracefile.FieldTrackDescriptor, msg(1, 100, 2, []byte("track"), 4, msg(1, 9, 2, 10)))},
		{"process_tree", event(tracefile.FieldProcessTree, msg(1, msg(1, 9, 2, 1), 2, msg(1, 10, 3, 9)))},
		{"for_testing event", event(tracefile.FieldForTesting, msg(1, []byte("payload")))},
	}
}

// checkReplacementSafe returns an error naming the first probe event packet
// the program returns Ok for. The probes are offered to one VM in turn, as
// a trace's packets are, so a program that needs an earlier packet to
// accept a later one is caught too.
func checkReplacementSafe(program []byte, limit int) error {
	vm, err := protovm.New(program, limit)
	if err != nil {
		return err
	}
	for _, pr := range replacementProbes() {
		if st := vm.ApplyPatch(pr.packet); st.Code == protovm.Ok {
			return fmt.Errorf("returns Ok for a %s packet; trace_processor replaces every packet whose patch is Ok by the VM state, so such events would vanish from the imported trace. A program for this path must fail (Error) on every packet that carries a payload and accept only pure patch packets; use path: restore for a program that folds event packets", pr.name)
		}
	}
	return nil
}
