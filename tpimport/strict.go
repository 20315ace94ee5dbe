package tpimport

import (
	"fmt"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
)

// msgType is what strict decoding knows of a message type: the fields
// that are themselves messages (by number), from reference/trace-format.md
// and protovm.md. Strict decoding goes exactly this far:
//
//   - every message is well-formed wire format (tags with field number ≥ 1,
//     varints ≤ 10 bytes, lengths inside the message, groups matched),
//     which is what protoc --decode, C++ and Python protobuf require of
//     every field, known or not;
//   - a length-delimited field declared as a message is decoded as one,
//     recursively, through the types below; a field whose nested schema is
//     not in the reference is checked as a message (it must parse) but its
//     own length-delimited fields are not descended into, since they may be
//     strings or bytes.
//
// A known field carrying the wrong wire type is not an error: protobuf
// parsers keep it as an unknown field. String fields are not checked for
// UTF-8: Perfetto's protos are proto2, where parsers do not require it.
type msgType struct {
	name     string
	children map[int32]*msgType
	// allMessages: every length-delimited field is a message of unknown
	// schema (InternedData: each field is a repeated interned entry).
	allMessages bool
}

// opaque is a message whose own fields are not known.
var opaque = &msgType{name: "message"}

func msg(name string, children map[int32]*msgType) *msgType {
	return &msgType{name: name, children: children}
}

var (
	tracePacketType *msgType

	protoVMMessageType = msg("ProtoVmMessage", nil)
	protoVMPatchType   = msg("ProtoVmPatch", map[int32]*msgType{3: protoVMMessageType, 4: protoVMMessageType})
	protoVMStateType   = msg("ProtoVmIncrementalState", map[int32]*msgType{3: protoVMMessageType, 4: protoVMMessageType})
	testEventType      = msg("TestEvent", map[int32]*msgType{6: protoVMPatchType, 7: protoVMStateType})
)

func init() {
	trackEvent := msg("TrackEvent", map[int32]*msgType{4: opaque}) // debug_annotations
	interned := &msgType{name: "InternedData", allMessages: true}
	trackDescriptor := msg("TrackDescriptor", map[int32]*msgType{
		3: msg("ProcessDescriptor", nil), 4: msg("ThreadDescriptor", nil), 8: msg("CounterDescriptor", nil),
	})
	clockSnapshot := msg("ClockSnapshot", map[int32]*msgType{1: msg("Clock", nil)})
	traceConfig := msg("TraceConfig", map[int32]*msgType{
		1:  msg("BufferConfig", nil),
		2:  msg("DataSource", map[int32]*msgType{1: msg("DataSourceConfig", map[int32]*msgType{12: msg("ProtoVmConfig", nil)})}),
		6:  msg("ProducerConfig", nil),
		21: msg("IncrementalStateConfig", nil),
	})
	traceStats := msg("TraceStats", map[int32]*msgType{
		1: msg("BufferStats", nil), 11: msg("FilterStats", nil), 18: msg("WriterStats", nil),
	})
	systemInfo := msg("SystemInfo", map[int32]*msgType{1: msg("Utsname", nil)})
	processTree := msg("ProcessTree", map[int32]*msgType{1: msg("Process", nil), 2: msg("Thread", nil)})
	sysStats := msg("SysStats", map[int32]*msgType{1: msg("MeminfoValue", nil), 2: opaque, 3: msg("CpuTimes", nil)})
	dataSources := msg("DataSources", map[int32]*msgType{1: msg("DataSource", nil)})
	serviceEvent := msg("TracingServiceEvent", map[int32]*msgType{7: dataSources, 8: dataSources})
	provenance := msg("TraceProvenance", map[int32]*msgType{
		2: msg("Buffer", map[int32]*msgType{1: msg("Sequence", nil)}),
	})
	defaults := msg("TracePacketDefaults", map[int32]*msgType{11: msg("TrackEventDefaults", nil)})
	tracePacketType = msg("TracePacket", map[int32]*msgType{
		2:   processTree,
		6:   clockSnapshot,
		7:   sysStats,
		11:  trackEvent,
		12:  interned,
		33:  traceConfig,
		35:  traceStats,
		44:  msg("ThreadDescriptor", nil),
		45:  systemInfo,
		59:  defaults,
		60:  trackDescriptor,
		69:  serviceEvent,
		89:  msg("TraceUuid", nil),
		124: provenance,
		900: testEventType,
	})
	instance := msg("ProtoVms.Instance", map[int32]*msgType{1: msg("VmProgram", nil), 2: tracePacketType})
	tracePacketType.children[125] = msg("ProtoVms", map[int32]*msgType{1: instance})
}

// maxStrictDepth bounds recursion (protobuf's own default limit is 100).
const maxStrictDepth = 64

// StrictError is a payload that strict protobuf decoders reject.
type StrictError struct {
	// Path names the fields from the TracePacket down to the bad one, e.g.
	// "for_testing(900: TestEvent)".
	Path string
	Err  error
}

func (e *StrictError) Error() string {
	if e.Path == "" {
		return "TracePacket: " + e.Err.Error()
	}
	return e.Path + ": " + e.Err.Error()
}

// strictCheck decodes packet as a TracePacket as far as msgType goes and
// returns the first failure, or nil. The path is built only on failure.
func strictCheck(packet []byte) *StrictError {
	return strictMessage(packet, tracePacketType, 0)
}

func strictMessage(b []byte, t *msgType, depth int) *StrictError {
	if depth > maxStrictDepth {
		return &StrictError{Err: fmt.Errorf("nesting deeper than %d", maxStrictDepth)}
	}
	var bad *StrictError
	err := walk(b, func(f field) bool {
		if f.typ != protowire.BytesType {
			return true
		}
		child := t.children[f.num]
		if child == nil && t.allMessages {
			child = opaque
		}
		if child == nil {
			return true
		}
		if bad = strictMessage(f.payload, child, depth+1); bad != nil {
			bad.Path = joinPath(fieldLabel(t, f.num, child), bad.Path)
			return false
		}
		return true
	})
	if bad != nil {
		return bad
	}
	if err != nil {
		return &StrictError{Err: err}
	}
	return nil
}

func fieldLabel(parent *msgType, num int32, child *msgType) string {
	name := strconv.Itoa(int(num))
	if parent == tracePacketType {
		name = packetFieldName(num)
	}
	return name + "(" + strconv.Itoa(int(num)) + ": " + child.name + ")"
}

func joinPath(a, b string) string {
	if b == "" {
		return a
	}
	return a + "." + b
}
