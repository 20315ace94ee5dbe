package tracefile

import (
	"slices"
	"strconv"

	"github.com/tracepipe/tracepipe/internal/loss"
)

// TracePacket field numbers tracepipe reads or writes (trace-format.md §2).
// They are part of the wire format and must never change.
const (
	FieldProcessTree           = 2
	FieldTrustedUID            = 3
	FieldClockSnapshot         = 6
	FieldSysStats              = 7
	FieldTimestamp             = 8
	FieldTrustedSequenceID     = 10
	FieldTrackEvent            = 11
	FieldInternedData          = 12
	FieldSequenceFlags         = 13
	FieldTraceConfig           = 33
	FieldTraceStats            = 35
	FieldSynchronizationMarker = 36
	FieldIncrementalStateClear = 41
	FieldPreviousPacketDropped = 42
	FieldProcessDescriptor     = 43
	FieldThreadDescriptor      = 44
	FieldSystemInfo            = 45
	FieldCompressedPackets     = 50
	FieldTimestampClockID      = 58
	FieldTracePacketDefaults   = 59
	FieldTrackDescriptor       = 60
	FieldServiceEvent          = 69
	FieldExtensionDescriptor   = 72
	FieldTrustedPID            = 79
	FieldFirstPacketOnSequence = 87
	FieldTraceUUID             = 89
	FieldMachineID             = 98
	FieldRemoteClockSync       = 107
	FieldTraceProvenance       = 124
	FieldProtoVMs              = 125
	FieldTraceAttributes       = 126
	FieldZstdCompressedPackets = 133
	FieldForTesting            = 900
	traceFieldPacket           = 1 // Trace.packet
	serviceSequenceID          = 1 // trusted_packet_sequence_id of the service's own packets
	clockBoottime              = 6 // BuiltinClock BOOTTIME
)

// packetFieldNames names the TracePacket fields in trace-format.md §2 and §7.
// A payload field's name is also its [PacketInfo.Kind].
var packetFieldNames = map[int32]string{
	FieldProcessTree:           "process_tree",
	FieldTrustedUID:            "trusted_uid",
	FieldClockSnapshot:         "clock_snapshot",
	FieldSysStats:              "sys_stats",
	FieldTimestamp:             "timestamp",
	FieldTrustedSequenceID:     "trusted_packet_sequence_id",
	FieldTrackEvent:            "track_event",
	FieldInternedData:          "interned_data",
	FieldSequenceFlags:         "sequence_flags",
	FieldTraceConfig:           "trace_config",
	FieldTraceStats:            "trace_stats",
	FieldSynchronizationMarker: "synchronization_marker",
	FieldIncrementalStateClear: "incremental_state_cleared",
	FieldPreviousPacketDropped: "previous_packet_dropped",
	FieldProcessDescriptor:     "process_descriptor",
	FieldThreadDescriptor:      "thread_descriptor",
	FieldSystemInfo:            "system_info",
	FieldCompressedPackets:     "compressed_packets",
	FieldTimestampClockID:      "timestamp_clock_id",
	FieldTracePacketDefaults:   "trace_packet_defaults",
	FieldTrackDescriptor:       "track_descriptor",
	FieldServiceEvent:          "service_event",
	FieldExtensionDescriptor:   "extension_descriptor",
	FieldTrustedPID:            "trusted_pid",
	FieldFirstPacketOnSequence: "first_packet_on_sequence",
	FieldTraceUUID:             "trace_uuid",
	FieldMachineID:             "machine_id",
	FieldRemoteClockSync:       "remote_clock_sync",
	FieldTraceProvenance:       "trace_provenance",
	FieldProtoVMs:              "protovms",
	FieldTraceAttributes:       "trace_attributes",
	FieldZstdCompressedPackets: "zstd_compressed_packets",
	FieldForTesting:            "for_testing",
	FieldTrigger:               "trigger",
	FieldCloneSnapshotTrigger:  "clone_snapshot_trigger",
}

// headerField reports the TracePacket fields that describe a packet rather than
// carry its payload; they never decide [PacketInfo.Kind]. interned_data and
// trace_packet_defaults travel beside a payload and only name the kind of a
// packet that carries nothing else.
//
// A switch rather than a map: DecodePacket asks once per field, and a map
// lookup was 40% of its time.
func headerField(num int32) bool {
	switch num {
	case FieldTrustedUID, FieldTimestamp, FieldTrustedSequenceID, FieldSequenceFlags,
		FieldIncrementalStateClear, FieldPreviousPacketDropped, FieldTimestampClockID,
		FieldTrustedPID, FieldFirstPacketOnSequence, FieldMachineID, FieldInternedData,
		FieldTracePacketDefaults:
		return true
	}
	return false
}

// PacketFieldName returns the name of TracePacket field num, or "field_<num>"
// for a field this package does not know.
func PacketFieldName(num int32) string {
	if n, ok := packetFieldNames[num]; ok {
		return n
	}
	return "field_" + strconv.Itoa(int(num))
}

// Data-loss reason bits carried in previous_packet_dropped
// (trace-buffer-v2.md §8), defined once in internal/loss, which buffer
// shares.
const (
	LossPresent               = loss.Present
	LossReadGap               = loss.ReadGap
	LossChunkCorrupted        = loss.ChunkCorrupted
	LossOrphanContinuation    = loss.OrphanContinuation
	LossReassemblyGap         = loss.ReassemblyGap
	LossReassemblyBrokenChain = loss.ReassemblyBrokenChain
	LossOverwrite             = loss.Overwrite
	LossWriterAbort           = loss.WriterAbort
	LossSMBFull               = loss.SMBFull
)

// LossReasonString renders a previous_packet_dropped bitmask as its reason
// names joined by "|" (e.g. 65 → "PRESENT|OVERWRITE"); unknown bits appear as
// "bit<n>". Zero renders as "0".
func LossReasonString(mask uint32) string { return loss.String(mask) }

// PacketKinds returns every name [PacketInfo.Kind] can return for a field
// this package knows (payload fields, plus interned_data and
// trace_packet_defaults, which name a packet carrying nothing else),
// sorted. Filters check their kind literals against it.
func PacketKinds() []string {
	var out []string
	for num, name := range packetFieldNames {
		if headerField(num) && num != FieldInternedData && num != FieldTracePacketDefaults {
			continue
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}
