package plugins

import "fmt"

// FlushFlags says why a flush was asked for, with Perfetto's encoding
// (include/perfetto/tracing/core/flush_flags.h, an ABI: the same uint64
// travels in the plugin protocol's FlushRequest.flags and in Perfetto
// IPC's Flush command): bits 0..3 the reason, bits 4..7 the initiator,
// bits 8..11 the clone target. Unknown values read as UNKNOWN.
type FlushFlags uint64

// FlushReason is bits 0..3 of FlushFlags.
type FlushReason uint8

// Flush reasons (Perfetto's FlushFlags::Reason).
const (
	FlushReasonUnknown    FlushReason = 0
	FlushReasonPeriodic   FlushReason = 1 // flush_period
	FlushReasonTraceStop  FlushReason = 2 // the session is stopping
	FlushReasonTraceClone FlushReason = 3 // a clone snapshot is being taken
	FlushReasonExplicit   FlushReason = 4 // a consumer asked (Perfetto's Flush)
)

// FlushInitiator is bits 4..7 of FlushFlags.
type FlushInitiator uint8

// Flush initiators (Perfetto's FlushFlags::Initiator).
const (
	FlushInitiatorUnknown     FlushInitiator = 0
	FlushInitiatorTraced      FlushInitiator = 1 // the service itself (tracepipe's service)
	FlushInitiatorPerfettoCmd FlushInitiator = 2
	FlushInitiatorConsumerSDK FlushInitiator = 3
)

// FlushCloneTarget is bits 8..11 of FlushFlags.
type FlushCloneTarget uint8

// Clone targets (Perfetto's FlushFlags::CloneTarget).
const (
	FlushCloneTargetUnknown   FlushCloneTarget = 0
	FlushCloneTargetBugreport FlushCloneTarget = 1
)

// NewFlushFlags encodes a reason, initiator and clone target.
func NewFlushFlags(r FlushReason, i FlushInitiator, t FlushCloneTarget) FlushFlags {
	return FlushFlags(uint64(r&0xf) | uint64(i&0xf)<<4 | uint64(t&0xf)<<8)
}

// Reason decodes bits 0..3; a value Perfetto does not define reads as
// FlushReasonUnknown.
func (f FlushFlags) Reason() FlushReason {
	if r := FlushReason(f & 0xf); r <= FlushReasonExplicit {
		return r
	}
	return FlushReasonUnknown
}

// Initiator decodes bits 4..7 (unknown values: FlushInitiatorUnknown).
func (f FlushFlags) Initiator() FlushInitiator {
	if i := FlushInitiator(f >> 4 & 0xf); i <= FlushInitiatorConsumerSDK {
		return i
	}
	return FlushInitiatorUnknown
}

// CloneTarget decodes bits 8..11 (unknown values: FlushCloneTargetUnknown).
func (f FlushFlags) CloneTarget() FlushCloneTarget {
	if t := FlushCloneTarget(f >> 8 & 0xf); t <= FlushCloneTargetBugreport {
		return t
	}
	return FlushCloneTargetUnknown
}

func (r FlushReason) String() string {
	switch r {
	case FlushReasonPeriodic:
		return "PERIODIC"
	case FlushReasonTraceStop:
		return "TRACE_STOP"
	case FlushReasonTraceClone:
		return "TRACE_CLONE"
	case FlushReasonExplicit:
		return "EXPLICIT"
	}
	return "UNKNOWN"
}

func (f FlushFlags) String() string {
	return fmt.Sprintf("reason %v initiator %d clone target %d", f.Reason(), f.Initiator(), f.CloneTarget())
}

// FlagsFlusher is implemented by data sources that want to know why they
// are flushed (a TRACE_CLONE flush may be worth more effort than a
// PERIODIC one, as in Perfetto's OnFlush(FlushArgs)). The service then
// calls FlushWithFlags instead of DataSource.Flush; its contract is
// Flush's. A separate interface so that existing data sources keep
// compiling.
type FlagsFlusher interface {
	FlushWithFlags(flags FlushFlags) error
}
