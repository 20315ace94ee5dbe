package config

import (
	"bytes"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// What the consumer port does with each field of Perfetto's TraceConfig:
// the one list that ConfigFromTraceConfig names refused fields from, that
// `tracepipe config perfetto-fields` prints (docs/perfetto-traceconfig.md)
// and that TestPerfettoTraceConfigFieldsAreTheMapping holds to the
// mapping's behaviour, field by field.

// fieldSupport is what the mapping does with a TraceConfig field.
type fieldSupport uint8

const (
	fieldMapped  fieldSupport = iota // becomes part of the session
	fieldIgnored                     // accepted, without effect
	fieldRefused                     // EnableTracing fails naming it
)

func (s fieldSupport) String() string {
	switch s {
	case fieldMapped:
		return "mapped"
	case fieldIgnored:
		return "accepted, no effect"
	default:
		return "**refused**"
	}
}

// perfettoField is one field of a TraceConfig message, as
// protos/perfetto/config/trace_config.proto declares it at the golden
// captures' commit (ec5d16b).
type perfettoField struct {
	path    string // in TraceConfig, "[]" for repeated messages: "buffers[].size_kb"
	num     protowire.Number
	typ     string // as the .proto declares it (message and enum types by name)
	support fieldSupport
	note    string // what it becomes, or why it is not supported
}

// traceConfigFields lists every field of TraceConfig and of the nested
// messages the mapping reads (BufferConfig, DataSource, TriggerConfig,
// Trigger, IncrementalStateConfig). A refused message's own fields are
// not listed: the message is refused whole. DataSourceConfig's fields
// other than the four the mapping reads reach the producers unread.
var traceConfigFields = []perfettoField{
	{"buffers", 1, "BufferConfig", fieldMapped, "one trace buffer each (`buffers[]`)"},
	{"buffers[].size_kb", 1, "uint32", fieldMapped, "`size_kb`"},
	{"buffers[].fill_policy", 4, "FillPolicy", fieldMapped, "UNSPECIFIED and RING_BUFFER: `ring_buffer`; DISCARD: `discard`; other values refused"},
	{"buffers[].transfer_on_clone", 5, "bool", fieldMapped, "`transfer_on_clone`: CloneSession moves the buffer into the clone and leaves an empty one"},
	{"buffers[].clear_before_clone", 6, "bool", fieldMapped, "`clear_before_clone`, with transfer_on_clone only: without it the config is refused naming the field (traced clears the buffer then too)"},
	{"buffers[].name", 7, "string", fieldMapped, "`name`, what `target_buffer_name` refers to"},
	{"buffers[].experimental_mode", 8, "ExperimentalMode", fieldIgnored, "tracepipe's buffers are always TraceBuffer V2"},
	{"data_sources", 2, "DataSource", fieldMapped, "one data source each; one that no connected producer and no built-in source serves is skipped, as traced skips it"},
	{"data_sources[].config", 1, "DataSourceConfig", fieldMapped, "name, target_buffer, target_buffer_name and buffer_exhausted_policy (STALL_THEN_ABORT and STALL_THEN_DROP: `stall`) are read; the whole message, as sent, goes to the producers"},
	{"data_sources[].producer_name_filter", 2, "string", fieldMapped, "exact producer names"},
	{"data_sources[].producer_name_regex_filter", 3, "string", fieldMapped, "regular expressions (Go syntax) that must match a producer's whole name; OR'ed with producer_name_filter"},
	{"data_sources[].machine_name_filter", 4, "string", fieldRefused, "(one machine per service)"},
	{"duration_ms", 3, "uint32", fieldMapped, "`duration`"},
	{"enable_extra_guardrails", 4, "bool", fieldIgnored, "the perfetto command sets it"},
	{"lockdown_mode", 5, "LockdownModeOperation", fieldRefused, ""},
	{"producers", 6, "ProducerConfig", fieldRefused, "(SMB sizes per producer)"},
	{"statsd_metadata", 7, "StatsdMetadata", fieldIgnored, "the perfetto command sets it"},
	{"write_into_file", 8, "bool", fieldMapped, "`write_into_file`, into the file descriptor the consumer passes (`perfetto -o`); without one EnableTracing fails"},
	{"file_write_period_ms", 9, "uint32", fieldMapped, "`file_write_period` (below 100: 100; unset with write_into_file: 5000)"},
	{"max_file_size_bytes", 10, "uint64", fieldMapped, "`max_file_size`"},
	{"guardrail_overrides", 11, "GuardrailOverrides", fieldRefused, ""},
	{"deferred_start", 12, "bool", fieldMapped, "the session waits for StartTracing"},
	{"flush_period_ms", 13, "uint32", fieldMapped, "`flush_period`"},
	{"flush_timeout_ms", 14, "uint32", fieldMapped, "`flush_timeout`"},
	{"notify_traceur", 16, "bool", fieldRefused, "(Android)"},
	{"trigger_config", 17, "TriggerConfig", fieldMapped, "`trigger_config`"},
	{"trigger_config.trigger_mode", 1, "TriggerMode", fieldMapped, "START_TRACING, STOP_TRACING, CLONE_SNAPSHOT (a consumer observing TYPE_CLONE_TRIGGER_HIT is told and clones); other values refused"},
	{"trigger_config.triggers", 2, "Trigger", fieldMapped, "`triggers[]`"},
	{"trigger_config.triggers[].name", 1, "string", fieldMapped, "`name`"},
	{"trigger_config.triggers[].producer_name_regex", 2, "string", fieldMapped, "`producer_name_regex`: must match the whole name of the producer that activates the trigger"},
	{"trigger_config.triggers[].stop_delay_ms", 3, "uint32", fieldMapped, "`stop_delay`"},
	{"trigger_config.triggers[].max_per_24_h", 4, "uint32", fieldMapped, "`max_per_24h`"},
	{"trigger_config.triggers[].skip_probability", 5, "double", fieldMapped, "`skip_probability`"},
	{"trigger_config.trigger_timeout_ms", 3, "uint32", fieldMapped, "`timeout` (START_TRACING, STOP_TRACING); with CLONE_SNAPSHOT, the session's duration, as in traced"},
	{"trigger_config.use_clone_snapshot_if_available", 5, "bool", fieldRefused, "(when true)"},
	{"activate_triggers", 18, "string", fieldIgnored, "as in traced, whose service does not read it (the perfetto command sends these names itself, as a producer's ActivateTriggers); the service's log warns that they were not activated"},
	{"allow_user_build_tracing", 19, "bool", fieldRefused, "(Android)"},
	{"builtin_data_sources", 20, "BuiltinDataSource", fieldRefused, ""},
	{"incremental_state_config", 21, "IncrementalStateConfig", fieldMapped, "`incremental_state`"},
	{"incremental_state_config.clear_period_ms", 1, "uint32", fieldMapped, "`incremental_state.clear_period` (below 100: 100)"},
	{"unique_session_name", 22, "string", fieldMapped, "names the session for CloneSession and QueryServiceState"},
	{"data_source_stop_timeout_ms", 23, "uint32", fieldIgnored, ""},
	{"compression_type", 24, "CompressionType", fieldRefused, ""},
	{"incident_report_config", 25, "IncidentReportConfig", fieldRefused, "(Android)"},
	{"trace_uuid_msb", 27, "int64", fieldIgnored, "the perfetto command sets it"},
	{"trace_uuid_lsb", 28, "int64", fieldIgnored, "the perfetto command sets it"},
	{"output_path", 29, "string", fieldRefused, "(pass the file descriptor: `perfetto -o`)"},
	{"bugreport_score", 30, "int32", fieldRefused, "(Android)"},
	{"statsd_logging", 31, "StatsdLogging", fieldIgnored, "the perfetto command sets it"},
	{"trace_filter", 33, "TraceFilter", fieldRefused, ""},
	{"android_report_config", 34, "AndroidReportConfig", fieldRefused, "(Android)"},
	{"cmd_trace_start_delay", 35, "CmdTraceStartDelay", fieldRefused, ""},
	{"prefer_suspend_clock_for_duration", 36, "bool", fieldRefused, ""},
	{"bugreport_filename", 38, "string", fieldRefused, "(Android)"},
	{"session_semaphores", 39, "SessionSemaphore", fieldRefused, ""},
	{"priority_boost", 40, "PriorityBoostConfig", fieldRefused, ""},
	{"exclusive_prio", 41, "uint32", fieldRefused, ""},
	{"trace_all_machines", 43, "bool", fieldRefused, "(one machine per service)"},
	{"write_flush_mode", 44, "WriteFlushMode", fieldRefused, ""},
	{"fflush_post_write", 45, "FFlushMode", fieldRefused, ""},
	{"compression", 47, "CompressionConfig", fieldRefused, ""},
	{"trace_attributes", 48, "TraceAttributes", fieldRefused, "(`perfetto --attribute`)"},
}

// traceConfigField returns the field num of the message at parent ("" for
// TraceConfig itself, else a path such as "buffers[]"), or nil.
func traceConfigField(parent string, num protowire.Number) *perfettoField {
	for i := range traceConfigFields {
		f := &traceConfigFields[i]
		if f.num == num && fieldParent(f.path) == parent {
			return f
		}
	}
	return nil
}

// fieldParent is the path of the message holding the field at path.
func fieldParent(path string) string {
	i := strings.LastIndexByte(path, '.')
	if i < 0 {
		return ""
	}
	return path[:i]
}

// fieldLeaf is the field's own name.
func fieldLeaf(path string) string { return path[strings.LastIndexByte(path, '.')+1:] }

// traceConfigFieldName names field num of the message at parent for an
// error: its name, or "field N" for a number the table does not know.
func traceConfigFieldName(parent string, num protowire.Number) string {
	if f := traceConfigField(parent, num); f != nil {
		return fieldLeaf(f.path)
	}
	if parent == "" {
		return traceConfigSchemaName(num) // a field the table leaves out, by the schema (perfetto_config.proto)
	}
	return fmt.Sprintf("field %d", num)
}

// PerfettoTraceConfigMarkdown is docs/perfetto-traceconfig.md: every
// TraceConfig field and what a consumer's EnableTracing does with it.
func PerfettoTraceConfigMarkdown() []byte {
	var b bytes.Buffer
	b.WriteString(`<!-- Generated by ` + "`make docs`" + ` (tracepipe config perfetto-fields) from the TraceConfig mapping
     (config/perfetto_fields.go). Do not edit: a test fails when this file and the code disagree,
     and another holds the code's table to what the mapping does with each field. -->

# Perfetto TraceConfig fields

What tracepipe's consumer port does with each field of the TraceConfig a Perfetto consumer
sends (EnableTracing: ` + "`perfetto -c config.pbtxt --txt`" + `): fields of Perfetto's
protos/perfetto/config/trace_config.proto at commit ec5d16b. A field is **mapped** onto the
tracepipe session (the YAML key it becomes is named), **accepted** without effect, or
**refused**: EnableTracing fails with one error naming every refused field
(` + "`trace_config: not supported by tracepipe: lockdown_mode, data_sources[0].machine_name_filter`" + `).
A field number not listed here is refused as ` + "`field N`" + `. A refused message is refused
whole, so its own fields are not listed.

## Not supported

`)
	for _, f := range traceConfigFields {
		if f.support == fieldRefused {
			fmt.Fprintf(&b, "- `%s`", f.path)
			if f.note != "" {
				b.WriteString(" " + f.note)
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\n## Every field\n\n| field | # | type | tracepipe | notes |\n|---|---|---|---|---|\n")
	for _, f := range traceConfigFields {
		fmt.Fprintf(&b, "| `%s` | %d | %s | %s | %s |\n", f.path, f.num, f.typ, f.support, f.note)
	}
	return b.Bytes()
}
