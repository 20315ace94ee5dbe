package tracefile

import (
	"google.golang.org/protobuf/encoding/protowire"
)

// The field names DumpPacket prints: every message tracepipe writes, and
// those of Perfetto's trace proto that its data sources and Perfetto
// producers commonly emit (trace-format.md §2-§7). A field missing here
// prints by number; a table, not generated code, because the dump must
// render whatever a producer wrote, valid or not.

// msgDesc names the fields of one message.
type msgDesc struct {
	name   string
	fields map[protowire.Number]fieldDesc
}

// fieldKind says how a field's value reads beyond its wire type.
type fieldKind uint8

const (
	kindPlain     fieldKind = iota
	kindBool                // varint 0/1
	kindSigned              // int32/int64: a varint holding a two's-complement value
	kindString              // length-delimited text
	kindDouble              // fixed64 IEEE 754
	kindNanos               // a duration or time in nanoseconds (shown also in seconds)
	kindBoottime            // TracePacket.timestamp: nanoseconds, BOOTTIME unless told otherwise
	kindSeqFlags            // TracePacket.sequence_flags
	kindLossBits            // previous_packet_dropped
	kindUUIDBytes           // 16 bytes shown as a UUID
)

// fieldDesc names one field; msg is set for nested messages, enum for
// enumerations.
type fieldDesc struct {
	name string
	kind fieldKind
	msg  *msgDesc
	enum map[uint64]string
}

func nf(name string) fieldDesc                       { return fieldDesc{name: name} }
func nfk(name string, k fieldKind) fieldDesc         { return fieldDesc{name: name, kind: k} }
func nfm(name string, m *msgDesc) fieldDesc          { return fieldDesc{name: name, msg: m} }
func nfe(name string, e map[uint64]string) fieldDesc { return fieldDesc{name: name, enum: e} }

func msg(name string, fields map[protowire.Number]fieldDesc) *msgDesc {
	return &msgDesc{name: name, fields: fields}
}

var builtinClocks = map[uint64]string{0: "UNKNOWN", 1: "REALTIME", 2: "REALTIME_COARSE", 3: "MONOTONIC",
	4: "MONOTONIC_COARSE", 5: "MONOTONIC_RAW", 6: "BOOTTIME", 9: "TSC", 10: "PERF", 11: "TRACE_FILE"}

var (
	clockDesc = msg("ClockSnapshot.Clock", map[protowire.Number]fieldDesc{
		1: nfe("clock_id", builtinClocks), 2: nfk("timestamp", kindNanos), 3: nfk("is_incremental", kindBool), 4: nf("unit_multiplier_ns"),
	})
	clockSnapshotDesc = msg("ClockSnapshot", map[protowire.Number]fieldDesc{
		1: nfm("clocks", clockDesc), 2: nfe("primary_trace_clock", builtinClocks),
	})

	debugAnnotationDesc = msg("DebugAnnotation", map[protowire.Number]fieldDesc{
		1: nf("name_iid"), 10: nfk("name", kindString), 2: nfk("bool_value", kindBool), 3: nf("uint_value"),
		4: nfk("int_value", kindSigned), 5: nfk("double_value", kindDouble), 6: nfk("string_value", kindString),
		7: nf("pointer_value"), 17: nf("string_value_iid"),
	})
	trackEventDesc = msg("TrackEvent", map[protowire.Number]fieldDesc{
		1: nfk("timestamp_delta_us", kindSigned), 16: nfk("timestamp_absolute_us", kindSigned),
		3: nf("category_iids"), 22: nfk("categories", kindString), 10: nf("name_iid"), 23: nfk("name", kindString),
		9:  nfe("type", map[uint64]string{0: "TYPE_UNSPECIFIED", 1: "SLICE_BEGIN", 2: "SLICE_END", 3: "INSTANT", 4: "COUNTER", 5: "STATE"}),
		11: nf("track_uuid"), 30: nfk("counter_value", kindSigned), 44: nfk("double_counter_value", kindDouble),
		31: nf("extra_counter_track_uuids"), 12: nfk("extra_counter_values", kindSigned),
		45: nf("extra_double_counter_track_uuids"), 46: nfk("extra_double_counter_values", kindDouble),
		4: nfm("debug_annotations", debugAnnotationDesc), 47: nf("flow_ids"), 48: nf("terminating_flow_ids"),
		36: nf("flow_ids_old"),
	})
	iidNameDesc   = msg("InternedString", map[protowire.Number]fieldDesc{1: nf("iid"), 2: nfk("name", kindString)})
	sourceLocDesc = msg("SourceLocation", map[protowire.Number]fieldDesc{
		1: nf("iid"), 2: nfk("file_name", kindString), 3: nfk("function_name", kindString), 4: nf("line_number"),
	})
	internedDataDesc = msg("InternedData", map[protowire.Number]fieldDesc{
		1: nfm("event_categories", iidNameDesc), 2: nfm("event_names", iidNameDesc),
		3: nfm("debug_annotation_names", iidNameDesc), 4: nfm("source_locations", sourceLocDesc),
		29: nfm("debug_annotation_string_values", msg("InternedString", map[protowire.Number]fieldDesc{1: nf("iid"), 2: nfk("str", kindString)})),
	})
	trackEventDefaultsDesc = msg("TrackEventDefaults", map[protowire.Number]fieldDesc{
		11: nf("track_uuid"), 31: nf("extra_counter_track_uuids"), 45: nf("extra_double_counter_track_uuids"),
	})
	tracePacketDefaultsDesc = msg("TracePacketDefaults", map[protowire.Number]fieldDesc{
		58: nfe("timestamp_clock_id", builtinClocks), 11: nfm("track_event_defaults", trackEventDefaultsDesc),
	})

	processDescriptorDesc = msg("ProcessDescriptor", map[protowire.Number]fieldDesc{
		1: nfk("pid", kindSigned), 2: nfk("cmdline", kindString), 6: nfk("process_name", kindString),
	})
	threadDescriptorDesc = msg("ThreadDescriptor", map[protowire.Number]fieldDesc{
		1: nfk("pid", kindSigned), 2: nfk("tid", kindSigned), 5: nfk("thread_name", kindString),
	})
	counterDescriptorDesc = msg("CounterDescriptor", map[protowire.Number]fieldDesc{
		1: nf("type"), 2: nfk("categories", kindString),
		3: nfe("unit", map[uint64]string{0: "UNIT_UNSPECIFIED", 1: "UNIT_TIME_NS", 2: "UNIT_COUNT", 3: "UNIT_SIZE_BYTES"}),
		6: nfk("unit_name", kindString), 4: nfk("unit_multiplier", kindSigned), 5: nfk("is_incremental", kindBool),
		7: nfk("y_axis_share_key", kindString),
	})
	trackDescriptorDesc = msg("TrackDescriptor", map[protowire.Number]fieldDesc{
		1: nf("uuid"), 5: nf("parent_uuid"), 2: nfk("name", kindString), 10: nfk("static_name", kindString),
		13: nfk("atrace_name", kindString), 14: nfk("description", kindString),
		3: nfm("process", processDescriptorDesc), 4: nfm("thread", threadDescriptorDesc), 8: nfm("counter", counterDescriptorDesc),
		11: nfe("child_ordering", map[uint64]string{0: "UNKNOWN", 1: "LEXICOGRAPHIC", 2: "CHRONOLOGICAL", 3: "EXPLICIT"}),
		12: nfk("sibling_order_rank", kindSigned),
	})

	processTreeDesc = msg("ProcessTree", map[protowire.Number]fieldDesc{
		1: nfm("processes", msg("ProcessTree.Process", map[protowire.Number]fieldDesc{
			1: nfk("pid", kindSigned), 2: nfk("ppid", kindSigned), 3: nfk("cmdline", kindString), 9: nfk("cmdline_is_comm", kindBool),
			5: nfk("uid", kindSigned), 6: nfk("nspid", kindSigned), 7: nfk("process_start_from_boot", kindNanos), 8: nfk("is_kthread", kindBool),
		})),
		2: nfm("threads", msg("ProcessTree.Thread", map[protowire.Number]fieldDesc{
			1: nfk("tid", kindSigned), 3: nfk("tgid", kindSigned), 2: nfk("name", kindString), 4: nfk("nstid", kindSigned),
		})),
		3: nfk("collection_end_timestamp", kindBoottime),
	})
	keyValueDesc = msg("SysStats.Value", map[protowire.Number]fieldDesc{1: nf("key"), 2: nf("value")})
	sysStatsDesc = msg("SysStats", map[protowire.Number]fieldDesc{
		1: nfm("meminfo", keyValueDesc), 2: nfm("vmstat", keyValueDesc),
		3: nfm("cpu_stat", msg("SysStats.CpuTimes", map[protowire.Number]fieldDesc{
			1: nf("cpu_id"), 2: nfk("user_ns", kindNanos), 3: nfk("user_nice_ns", kindNanos), 4: nfk("system_mode_ns", kindNanos),
			5: nfk("idle_ns", kindNanos), 6: nfk("io_wait_ns", kindNanos), 7: nfk("irq_ns", kindNanos), 8: nfk("softirq_ns", kindNanos),
			9: nfk("steal_ns", kindNanos),
		})),
		4: nf("num_forks"), 5: nf("num_irq_total"), 6: nfm("num_irq", keyValueDesc), 7: nf("num_softirq_total"),
		8: nfm("num_softirq", keyValueDesc), 9: nfk("collection_end_timestamp", kindBoottime),
	})
	systemInfoDesc = msg("SystemInfo", map[protowire.Number]fieldDesc{
		1: nfm("utsname", msg("Utsname", map[protowire.Number]fieldDesc{
			1: nfk("sysname", kindString), 2: nfk("version", kindString), 3: nfk("release", kindString), 4: nfk("machine", kindString),
		})),
		2: nfk("android_build_fingerprint", kindString), 3: nf("hz"), 4: nfk("tracing_service_version", kindString),
		6: nf("page_size"), 7: nfk("timezone_off_mins", kindSigned), 8: nf("num_cpus"), 16: nf("system_ram_bytes"),
		17: nfk("machine_name", kindString),
	})
	dataSourceNamesDesc = msg("TracingServiceEvent.DataSources", map[protowire.Number]fieldDesc{
		1: nfm("data_source", msg("DataSource", map[protowire.Number]fieldDesc{1: nfk("producer_name", kindString), 2: nfk("data_source_name", kindString)})),
	})
	serviceEventDesc = msg("TracingServiceEvent", map[protowire.Number]fieldDesc{
		1: nfk("all_data_sources_started", kindBool), 2: nfk("tracing_started", kindBool),
		3: nfk("all_data_sources_flushed", kindBool), 4: nfk("read_tracing_buffers_completed", kindBool),
		5: nfk("tracing_disabled", kindBool), 6: nfk("seized_for_bugreport", kindBool),
		7: nfm("slow_starting_data_sources", dataSourceNamesDesc), 8: nfm("last_flush_slow_data_sources", dataSourceNamesDesc),
		9: nfk("flush_started", kindBool), 10: nfk("clone_started", kindBool), 11: nf("buffer_cloned"),
	})
	traceUUIDDesc       = msg("TraceUuid", map[protowire.Number]fieldDesc{1: nfk("msb", kindSigned), 2: nfk("lsb", kindSigned)})
	traceProvenanceDesc = msg("TraceProvenance", map[protowire.Number]fieldDesc{
		2: nfm("buffers", msg("TraceProvenance.Buffer", map[protowire.Number]fieldDesc{
			1: nfm("sequences", msg("TraceProvenance.Sequence", map[protowire.Number]fieldDesc{1: nf("id"), 2: nfk("producer_id", kindSigned)})),
		})),
	})
	triggerDesc = msg("Trigger", map[protowire.Number]fieldDesc{
		1: nfk("trigger_name", kindString), 2: nfk("producer_name", kindString), 3: nfk("trusted_producer_uid", kindSigned),
	})
	traceConfigDesc = msg("TraceConfig", map[protowire.Number]fieldDesc{
		tcBuffers: nfm("buffers", msg("TraceConfig.BufferConfig", map[protowire.Number]fieldDesc{
			bufSizeKB: nf("size_kb"), bufFillPolicy: nfe("fill_policy", map[uint64]string{0: "UNSPECIFIED", fillRingBuffer: "RING_BUFFER", fillDiscard: "DISCARD"}),
			bufName: nfk("name", kindString), bufTransferOnClone: nfk("transfer_on_clone", kindBool), bufClearBeforeClone: nfk("clear_before_clone", kindBool),
		})),
		tcDataSources: nfm("data_sources", msg("TraceConfig.DataSource", map[protowire.Number]fieldDesc{
			dsConfig: nfm("config", msg("DataSourceConfig", map[protowire.Number]fieldDesc{
				dscName: nfk("name", kindString), dscTargetBuffer: nf("target_buffer"),
				dscBufferExhausted: nfe("buffer_exhausted_policy", map[uint64]string{0: "UNSPECIFIED", exhaustedDrop: "BUFFER_EXHAUSTED_DROP", 2: "BUFFER_EXHAUSTED_STALL_THEN_ABORT", exhaustedStall: "BUFFER_EXHAUSTED_STALL_THEN_DROP"}),
				dscProtoVMConfig:   nfm("protovm_config", msg("ProtoVmConfig", map[protowire.Number]fieldDesc{protoVMMemoryKB: nf("memory_limit_kb")})),
			})),
			2: nfk("producer_name_filter", kindString),
		})),
		tcDurationMs: nf("duration_ms"),
		tcProducers: nfm("producers", msg("TraceConfig.ProducerConfig", map[protowire.Number]fieldDesc{
			1: nfk("producer_name", kindString), prodShmSizeKB: nf("shm_size_kb"), prodPageSizeKB: nf("page_size_kb"),
		})),
		tcWriteIntoFile: nfk("write_into_file", kindBool), tcFileWritePeriodMs: nf("file_write_period_ms"),
		tcMaxFileSizeBytes: nf("max_file_size_bytes"), tcFlushPeriodMs: nf("flush_period_ms"), tcFlushTimeoutMs: nf("flush_timeout_ms"),
		tcIncrementalStateConfig: nfm("incremental_state_config", msg("IncrementalStateConfig", map[protowire.Number]fieldDesc{isClearPeriodMs: nf("clear_period_ms")})),
		17:                       nf("trigger_config"), 22: nfk("unique_session_name", kindString),
	})
)

// traceStatsDesc is built from the counter tables the TraceStats decoder
// uses, so the names cannot drift from `tracepipe stats`.
var traceStatsDesc = func() *msgDesc {
	counters := func(name string, add func(map[protowire.Number]fieldDesc)) *msgDesc {
		m := map[protowire.Number]fieldDesc{}
		add(m)
		return msg(name, m)
	}
	buf := counters("TraceStats.BufferStats", func(m map[protowire.Number]fieldDesc) {
		for _, c := range bufferStatsFields {
			m[c.num] = nf(c.name)
		}
	})
	filter := counters("TraceStats.FilterStats", func(m map[protowire.Number]fieldDesc) {
		for _, c := range filterStatsFields {
			m[c.num] = nf(c.name)
		}
		m[fsPerBuffer] = nf("bytes_discarded_per_buffer")
	})
	producer := counters("TracepipeStats.Producer", func(m map[protowire.Number]fieldDesc) {
		for _, c := range producerStatsFields {
			m[c.num] = nf(c.name)
		}
		m[2] = nfk("data_source", kindString)
		m[7] = nfk("error", kindString)
	})
	tp := counters("TracepipeStats", func(m map[protowire.Number]fieldDesc) {
		for _, c := range tracepipeStatsFields {
			m[c.num] = nf(c.name)
		}
		m[tpProducers] = nfm("producers", producer)
	})
	writer := msg("TraceStats.WriterStats", map[protowire.Number]fieldDesc{
		wsSequenceID: nf("sequence_id"), wsBuffer: nf("buffer"), wsCounts: nf("chunk_payload_histogram_counts"), wsSum: nf("chunk_payload_histogram_sum"),
	})
	return counters("TraceStats", func(m map[protowire.Number]fieldDesc) {
		for _, c := range traceStatsFields {
			m[c.num] = nf(c.name)
		}
		m[15] = nfe("final_flush_outcome", map[uint64]string{0: "UNSPECIFIED", 1: "SUCCEEDED", 2: "FAILED"})
		m[tsBufferStats] = nfm("buffer_stats", buf)
		m[tsFilterStats] = nfm("filter_stats", filter)
		m[tsHistogramDef] = nf("chunk_payload_histogram_def")
		m[tsWriterStats] = nfm("writer_stats", writer)
		m[tsTracepipe] = nfm("tracepipe", tp)
	})
}()

// Field numbers of tracepipe's trigger packets (Perfetto's numbers).
const (
	FieldTrigger              = 46  // TracePacket.trigger: a trigger that acted
	FieldCloneSnapshotTrigger = 113 // TracePacket.clone_snapshot_trigger: what took a snapshot
)

// packetDesc is TracePacket: top-level names from packetFieldNames, with
// the nested messages above.
var packetDesc = func() *msgDesc {
	m := map[protowire.Number]fieldDesc{}
	for num, name := range packetFieldNames {
		m[protowire.Number(num)] = nf(name)
	}
	set := func(num protowire.Number, d fieldDesc) { d.name = m[num].name; m[num] = d }
	set(FieldTimestamp, nfk("", kindBoottime))
	set(FieldTrustedUID, nfk("", kindSigned))
	set(FieldTrustedPID, nfk("", kindSigned))
	set(FieldSequenceFlags, nfk("", kindSeqFlags))
	set(FieldPreviousPacketDropped, nfk("", kindLossBits))
	set(FieldIncrementalStateClear, nfk("", kindBool))
	set(FieldFirstPacketOnSequence, nfk("", kindBool))
	set(FieldTimestampClockID, nfe("", builtinClocks))
	set(FieldSynchronizationMarker, nfk("", kindUUIDBytes))
	set(FieldClockSnapshot, nfm("", clockSnapshotDesc))
	set(FieldTrackEvent, nfm("", trackEventDesc))
	set(FieldInternedData, nfm("", internedDataDesc))
	set(FieldTracePacketDefaults, nfm("", tracePacketDefaultsDesc))
	set(FieldTrackDescriptor, nfm("", trackDescriptorDesc))
	set(FieldProcessDescriptor, nfm("", processDescriptorDesc))
	set(FieldThreadDescriptor, nfm("", threadDescriptorDesc))
	set(FieldProcessTree, nfm("", processTreeDesc))
	set(FieldSysStats, nfm("", sysStatsDesc))
	set(FieldSystemInfo, nfm("", systemInfoDesc))
	set(FieldServiceEvent, nfm("", serviceEventDesc))
	set(FieldTraceUUID, nfm("", traceUUIDDesc))
	set(FieldTraceProvenance, nfm("", traceProvenanceDesc))
	set(FieldTraceConfig, nfm("", traceConfigDesc))
	set(FieldTraceStats, nfm("", traceStatsDesc))
	set(FieldTrigger, nfm("", triggerDesc))
	set(FieldCloneSnapshotTrigger, nfm("", triggerDesc))
	return msg("TracePacket", m)
}()
