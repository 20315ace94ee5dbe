package builtin

import "google.golang.org/protobuf/encoding/protowire"

// Field numbers of the TracePacket subset the built-in sources write
// (trace-format.md §2, §6, §7). A producer must never write the
// service-only fields (trusted_uid 3, trusted_packet_sequence_id 10,
// trusted_pid 79, machine_id 98, trace_config 33, trace_stats 35, ...):
// none of them is listed here on purpose.
const (
	pktProcessTree           = 2
	pktSysStats              = 7
	pktTimestamp             = 8
	pktTrackEvent            = 11
	pktInternedData          = 12
	pktSequenceFlags         = 13
	pktTrackDescriptor       = 60
	pktFirstPacketOnSequence = 87

	// TracePacket.sequence_flags values.
	seqIncrementalStateCleared = 1
	seqNeedsIncrementalState   = 2
)

// TrackDescriptor, TrackEvent, InternedData, EventName, DebugAnnotation.
const (
	tdUUID    = 1
	tdName    = 2
	tdCounter = 8

	teDebugAnnotations = 4
	teType             = 9
	teNameIID          = 10
	teTrackUUID        = 11
	teCounterValue     = 30

	teTypeSliceBegin = 1
	teTypeSliceEnd   = 2
	teTypeCounter    = 4

	idEventNames = 2
	enIID        = 1
	enName       = 2

	daIntValue    = 4
	daStringValue = 6
	daName        = 10
)

// ProcessTree (process_tree.proto).
const (
	ptProcesses              = 1
	ptThreads                = 2
	ptCollectionEndTimestamp = 3

	procPID           = 1
	procPPID          = 2
	procCmdline       = 3
	procUID           = 5
	procIsKthread     = 8
	procCmdlineIsComm = 9

	thrTID  = 1
	thrName = 2
	thrTGID = 3
)

// SysStats (sys_stats.proto).
const (
	ssMeminfo                = 1
	ssVmstat                 = 2
	ssCPUStat                = 3
	ssNumForks               = 4
	ssNumIrqTotal            = 5
	ssNumSoftirqTotal        = 7
	ssCollectionEndTimestamp = 9

	kvKey   = 1
	kvValue = 2

	cpuID        = 1
	cpuUser      = 2
	cpuUserNice  = 3
	cpuSystem    = 4
	cpuIdle      = 5
	cpuIoWait    = 6
	cpuIrq       = 7
	cpuSoftirq   = 8
	cpuStealTime = 9
)

// lenFieldSize is the encoded size of a length-delimited field with a
// one-byte tag (field numbers 1..15) and n bytes of content.
func lenFieldSize(n int) int { return 1 + protowire.SizeVarint(uint64(n)) + n }

// One-byte tags the synthetic generator writes as literal bytes.
const (
	tagTEDebugAnnotation byte = teDebugAnnotations<<3 | 2 // bytes
	tagDAName            byte = daName<<3 | 2
	tagDAIntValue        byte = daIntValue<<3 | 0 // varint
	tagDAStringValue     byte = daStringValue<<3 | 2
	tagTDCounter         byte = tdCounter<<3 | 2
)
