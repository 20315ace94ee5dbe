package config

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/tracepipe/tracepipe/sinks"
)

// The configuration schema: every key a config file may hold, with its
// type, default, the sink types that take it and a description. It is
// derived from the code, so that the reference (docs/configuration-
// reference.md), `tracepipe config schema` (a JSON Schema for editors)
// and the decoder cannot disagree:
//
//  1. the keys and their types come from the koanf tags of Config and the
//     structs below it (reflection), and from each registered sink type's
//     own factory (sinks.SectionKeysOf, which records the keys the factory
//     reads);
//  2. defaults come from SetDefaults applied to a config holding one
//     element per list, unless keyDocs gives one (defaults that depend on
//     other keys, or that a sink applies when it opens);
//  3. descriptions come from keyDocs, the one table of prose. Schema
//     reports a key without a description, and a description without a
//     key, as an error, so a new field cannot reach a release undocumented.

// SchemaKey is one configuration key.
type SchemaKey struct {
	// Path is the key's place: "duration", "buffers[].size_kb",
	// "sinks[].relay.address" ("[]" stands for any list index).
	Path string
	// Type is one of: string, boolean, integer, number, duration,
	// byte size, list of strings, section (a nested mapping), list (of
	// sections), map (free-form, checked by its owner).
	Type string
	// Default is the value a config that leaves the key out gets, as it
	// would be written ("" when there is none or it depends on other keys:
	// the description says).
	Default string
	// Enum lists the accepted values of a string key (nil: any).
	Enum []string
	// SinkTypes lists the sink types that take the key (sinks[] keys
	// only; nil: every sink type).
	SinkTypes []string
	// Doc describes the key in a sentence or three.
	Doc string
}

// keyDoc is the hand-written part of a key: its description, and where
// reflection cannot know them, its type, default and allowed values.
type keyDoc struct {
	doc  string
	def  string
	typ  string
	enum []string
}

// keyDocs describes every key (paths as in SchemaKey.Path).
var keyDocs = map[string]keyDoc{
	"duration":          {doc: "How long the session records; 0s records until stopped (Ctrl-C, SIGTERM, `tracepipe stop`). At most 168h. A session whose data sources all end on their own (synthetic max_packets) stops then. Perfetto: duration_ms."},
	"buffers":           {doc: "The trace buffers (Perfetto: buffers), 1 to 128. Data sources pick one with target_buffer or target_buffer_name."},
	"buffers[].name":    {doc: "Optional, unique name that data_sources[].target_buffer_name refers to."},
	"buffers[].size_kb": {doc: "Size in KiB: a multiple of 4, greater than 0, at most 4194303 (below 4 GiB)."},
	"buffers[].fill_policy": {doc: "ring_buffer overwrites the oldest chunks when the buffer is full (counted as chunks_overwritten); discard drops every later chunk (chunks_discarded).",
		enum: []string{FillPolicyRingBuffer, FillPolicyDiscard}},
	"buffers[].transfer_on_clone":       {doc: "Snapshots: move this buffer into the snapshot and leave an empty one behind, instead of copying it."},
	"buffers[].clear_before_clone":      {doc: "Snapshots, with transfer_on_clone: empty the buffer before the snapshot's flush, so the snapshot holds only what that flush wrote."},
	"data_sources":                      {doc: "The data sources to enable, at least one (Perfetto: data_sources)."},
	"data_sources[].name":               {doc: "A registered data source: built in, served by a plugin, or (with perfetto.enabled) by a Perfetto producer. `tracepipe validate` lists the known names when one is unknown."},
	"data_sources[].target_buffer":      {doc: "Index into buffers of the buffer this source writes into."},
	"data_sources[].target_buffer_name": {doc: "Name of the buffer this source writes into; wins over target_buffer when set."},
	"data_sources[].buffer_exhausted_policy": {doc: "When the producer's shared memory buffer is full: drop packets and flag the loss on the next packet (previous_packet_dropped), or stall the writer (up to 5 s) until chunks free up.",
		enum: []string{BufferExhaustedDrop, BufferExhaustedStall}},
	"data_sources[].config":                  {doc: "The source's own section, checked by the source (or plugin) itself; see the data source's documentation. Built-in and plugin data sources only: for a source Perfetto producers serve it is an error (use perfetto_config)."},
	"data_sources[].perfetto_config":         {doc: "Perfetto producers only (perfetto.enabled): the DataSourceConfig the producer gets, as in a Perfetto text config but in YAML, e.g. {sys_stats_config: {meminfo_period_ms: 500, meminfo_counters: [MEMINFO_MEM_TOTAL]}} or {ftrace_config: {ftrace_events: [sched/sched_switch]}}. Holds the data-source configs (ftrace_config, process_stats_config, sys_stats_config, track_event_config, system_info_config are checked field by field; enums by name or number); the others (chrome_config, heapprofd_config, ...) are forwarded untouched, given as base64 of the serialized message. name, target_buffer and the session fields are tracepipe's to set."},
	"data_sources[].plugin":                  {doc: "Path of an out-of-process plugin binary serving this source; relative paths are resolved against the config file's directory."},
	"data_sources[].protovm":                 {doc: "A ProtoVM program folding this source's overwritten packets into its incremental state (docs/protovm.md)."},
	"data_sources[].protovm.program":         {doc: "The program: .bin/.pb holds compiled VmProgram bytes, .yaml/.yml a readable program description compiled on load. Relative to the config file's directory."},
	"data_sources[].protovm.memory_limit_kb": {doc: "Memory the program's state may use, in KiB; required, greater than 0."},
	"data_sources[].protovm.path": {doc: "What the program serves: restore (tracepipe writes a restore packet ahead of a sequence's first packet after a loss) or perfetto (the state is written as a protovms packet for trace_processor). Empty: what a YAML program declares with `serves:`, else restore.",
		enum: []string{"", ProtoVMPathRestore, ProtoVMPathPerfetto}},
	"data_sources[].restart":                        {doc: "Plugins only: relaunch a plugin that died while recording, on a fresh shared memory buffer (what it committed before is kept). Absent: never."},
	"data_sources[].restart.max":                    {doc: "At most this many relaunches per session."},
	"data_sources[].restart.backoff":                {doc: "Wait this long after each death before relaunching."},
	"data_sources[].limits":                         {doc: "Plugins only: limits on the plugin's process tree; a memory or cpu breach kills the plugin and is its failure (`restart` applies), stderr beyond its rate is counted, not logged (docs/plugins.md, Faults)."},
	"data_sources[].limits.memory":                  {doc: "Memory limit (16MiB..1TiB): the cgroup's memory.max where tracepipe may set it, else RLIMIT_DATA. Absent: no limit."},
	"data_sources[].limits.cpu":                     {doc: "Total CPU time (at least 1s), RLIMIT_CPU. Absent: no limit."},
	"data_sources[].limits.stderr_lines_per_second": {doc: "Plugin stderr lines logged per second (burst: 10 s worth); the rest are counted as stderr_lines_suppressed.", def: "100"},
	"data_sources[].limits.stderr_bytes_per_second": {doc: "Plugin stderr bytes logged per second (burst: 10 s worth).", def: "64KiB"},
	"data_sources[].on_start_error": {doc: "What a data source that fails to start does to the session: continue records the failure and the other sources; abort ends the session.", def: OnStartErrorContinue,
		enum: []string{"", OnStartErrorContinue, OnStartErrorAbort}},
	"write_into_file":                {doc: "Streaming mode (Perfetto: write_into_file): read the buffers back every file_write_period (and whenever a buffer holds 8 MiB or 1/8 of its size unread) and stream the packets to the sinks. false: read them once, at stop (a ring-buffer trace of the last N MiB)."},
	"file_write_period":              {doc: "Readback period in streaming mode (Perfetto: file_write_period_ms); at least 100ms."},
	"max_file_size":                  {typ: "byte size", doc: "Bytes per output file for every file sink that sets no max_file_size of its own; a sink reaching it rotates: t.pftrace is followed by t.1.pftrace, t.2.pftrace, ... (the index goes before the extension). 0 is unlimited; else at least 1MiB. An integer, or a string with a unit (\"64MiB\", \"1GB\")."},
	"flush_period":                   {doc: "Every period the service asks every data source to commit what its writers hold (Perfetto: flush_period_ms). 0s: file_write_period in streaming mode, else no periodic flush (there is always one at stop). At least 100ms when set."},
	"flush_timeout":                  {doc: "How long a flush waits for the data sources' acknowledgements before the service scrapes their shared memory itself (a timeout counts flushes_failed; Perfetto: flush_timeout_ms); at most 5m."},
	"stats_period":                   {doc: "Streaming mode: how often a TraceStats packet (buffer usage, overwritten and dropped chunks) is written; one is always written at the end. At least 1s."},
	"incremental_state":              {doc: "Perfetto's incremental_state_config."},
	"incremental_state.clear_period": {doc: "Every period the data sources re-emit their incremental state (interned strings, track descriptors), so a reader can decode the trace after lost or overwritten packets. 0s is never; else at least 100ms."},
	"producers":                      {doc: "Shared memory buffer (SMB) sizes of the producers, by the service's rules: the page is 4, 8, 16 or 32 KiB; the SMB a multiple of the page, at most 32768 KiB."},
	"producers.smb_size_kb":          {doc: "SMB of each in-process data source, in KiB (Perfetto's default size)."},
	"producers.plugin_smb_size_kb":   {doc: "SMB of each plugin data source, in KiB. Default: the larger of smb_size_kb and 4096: a plugin's commits cross a process boundary, so it gets room to batch them (an unthrottled plugin reached about 0.55 GB/s with 256 KiB and 1.3 GB/s with 4 MiB on a 2-core machine).", def: "4096"},
	"producers.smb_page_size_kb":     {doc: "SMB page size in KiB: 4, 8, 16 or 32."},
	"plugin_dir":                     {doc: "A directory of data-source plugins (executables named tracepipe-plugin-*; other files are never run): a data source whose name no built-in source serves is looked up there (docs/plugins.md)."},
	"trigger_config":                 {doc: "Triggers (Perfetto: trigger_config): named events that start, stop or snapshot the session (docs/flight-recording.md). Absent: no triggers."},
	"trigger_config.trigger_mode": {doc: "start_tracing: record only after a trigger; stop_tracing: stop stop_delay after a trigger; clone_snapshot: write a snapshot of the buffers on each trigger and keep recording.",
		enum: []string{TriggerModeStart, TriggerModeStop, TriggerModeClone}},
	"trigger_config.triggers":                       {doc: "The triggers this session reacts to."},
	"trigger_config.triggers[].name":                {doc: "The trigger's name, as `tracepipe trigger NAME` or a producer sends it."},
	"trigger_config.triggers[].producer_name_regex": {doc: "Only producers whose name matches this regular expression may fire the trigger; empty: any producer."},
	"trigger_config.triggers[].stop_delay":          {doc: "stop_tracing: how long the session keeps recording after the trigger."},
	"trigger_config.triggers[].max_per_24h":         {doc: "At most this many activations in any 24 hours; 0 is unlimited."},
	"trigger_config.triggers[].skip_probability":    {doc: "Probability (0 to 1) that an activation is ignored, to sample a fleet."},
	"trigger_config.trigger_timeout":                {doc: "start_tracing and stop_tracing: required; how long the session waits for a trigger (start) or records at most (stop). Not used with clone_snapshot."},
	"unique_session_name":                           {doc: "Names the session for `tracepipe sessions`, `trigger`, `snapshot` and `stop`; a second session with the same name is refused."},
	"rotate_period":                                 {doc: "Rotate the file sinks' files this often, beside max_file_size; 0s never, else at least 1s."},
	"perfetto":                                      {doc: "tracepipe as a drop-in for Perfetto's traced: programs built for Perfetto connect to the producer socket and serve the data sources they register (docs/perfetto.md)."},
	"perfetto.enabled":                              {doc: "Listen on the Perfetto producer socket for the session."},
	"perfetto.producer_socket":                      {doc: "Socket path. Default: $PERFETTO_PRODUCER_SOCK_NAME, else /run/perfetto/traced-producer.sock when /run/perfetto is writable, else /tmp/perfetto-producer."},
	"perfetto.wait_for_producers":                   {doc: "How long `tracepipe run` waits, before the session starts, for the Perfetto data sources the config names to register.", def: "5s"},
	"perfetto.max_connections":                      {doc: "Connections the producer socket accepts at once; beyond them a connection is refused (logged at most once a second).", def: "256"},
	"perfetto.max_connections_per_uid":              {doc: "Connections one peer uid may hold, so one local user cannot take every slot.", def: "a quarter of max_connections"},
	"perfetto.init_timeout":                         {doc: "A producer connection that has not sent InitializeConnection (a consumer: not bound a service) this long after connecting is closed.", def: "10s"},

	"sinks":                  {doc: "Where packets go, at least one (`tracepipe run -o FILE` adds a file sink). Each sink is `type`, the keys every sink has, and its type's section; each runs behind its own queue."},
	"sinks[].type":           {doc: "The sink type; its section (`file:`, `relay:`, `nats:`) holds the type's own keys."},
	"sinks[].name":           {doc: "Label in logs and the summary; default: the destination."},
	"sinks[].filter":         {doc: "A CEL expression over `packet` (kind, size, timestamp, sequence_id, trusted_pid, trusted_uid, previous_packet_dropped, ...): only packets for which it is true are written. Empty keeps all; the service's own packets always pass."},
	"sinks[].filter_error":   {doc: "A packet the filter cannot evaluate is kept or dropped; counted in sink_filter_errors either way.", def: sinks.FilterErrorDrop, enum: []string{"", sinks.FilterErrorKeep, sinks.FilterErrorDrop}},
	"sinks[].queue_capacity": {doc: "Batches of 256 KiB the sink's queue holds; 0 is the default. A file sink blocks when its queue is full, and the ring holds what it has not taken; a network sink's longer queue has room for the network's stalls.", def: fmt.Sprintf("%d (file), %d (relay, nats)", sinks.DefaultFileQueueCapacity, sinks.DefaultQueueCapacity)},
	"sinks[].when_full":      {doc: "A full queue: block (readback waits, so a slow sink shows up as buffer overwrites; producers never wait) or drop (the batch is dropped and counted in sink_packets_dropped).", def: sinks.WhenFullBlock, enum: []string{"", sinks.WhenFullBlock, sinks.WhenFullDrop}},
	"sinks[].on_error":       {doc: "A failed write (disk full, connection lost for good): stop the session gracefully, or drop (count what this sink loses, keep the session going). Default: stop for a session's only file sink, else drop.", enum: []string{"", sinks.OnErrorStop, sinks.OnErrorDrop}},
	"sinks[].path":           {doc: "Flat form of file.path (file sinks)."},
	"sinks[].compression":    {doc: "Flat form of file.compression (file sinks)."},
	"sinks[].max_file_size":  {typ: "byte size", doc: "Flat form of file.max_file_size (file sinks)."},
	"sinks[].fsync_period":   {doc: "Flat form of file.fsync_period (file sinks)."},

	"sinks[].file":               {doc: "The file sink: a streamed Perfetto trace file, valid at every packet boundary."},
	"sinks[].file.path":          {doc: "The trace file; \"-\" is standard output. {timestamp} becomes the session's start time (20240131-142501.123), {pid} tracepipe's process id; the directory is created; an existing file is never overwritten. Relative to the config file's directory (to the current directory for -o and the embedded default config)."},
	"sinks[].file.compression":   {doc: "none, gzip or zstd; empty: from the name (.gz, .zst, else none). A name that says otherwise is an error."},
	"sinks[].file.max_file_size": {doc: "Bytes on disk per file (compressed bytes when compressed) before rotating (t.pftrace, then t.1.pftrace, ...); 0: the top-level max_file_size; else at least 1MiB. Every rotated file is self-contained."},
	"sinks[].file.fsync_period":  {doc: "fsync the file this often; 0s: 5s; negative: only on rotation and close; else at least 100ms.", def: sinks.DefaultFsyncPeriod.String()},
	"sinks[].file.buffer_size":   {doc: "Write buffer in bytes.", def: "256KiB"},

	"sinks[].file.disk_full_retry_max": {doc: "With on_error: drop, a sink whose file system filled up (ENOSPC, EDQUOT) counts what it drops and tries again, 1s after the failure, then at doubling intervals up to this; with room again it continues in the next file (t.1.pftrace, self-contained, starting with a TraceStats that records the gap). Negative: never resume; 0s: 30s; else at least 100ms.", def: sinks.DefaultResumeMax.String()},

	"sinks[].relay":                       {doc: "The relay sink: streams packets to `tracepipe serve` on another machine, with acknowledgements and resend (docs/sinks.md)."},
	"sinks[].relay.address":               {doc: "Required: host:port of `tracepipe serve`."},
	"sinks[].relay.machine_id":            {doc: "This machine's id in merged traces; default: a hash of /etc/machine-id."},
	"sinks[].relay.hostname":              {doc: "This machine's name in merged traces; default: the host name."},
	"sinks[].relay.clock_sync":            {doc: "Clock-sync rounds with the receiver, so a merged trace can align this machine's clocks (docs/multi-machine.md); false turns them off.", def: "true"},
	"sinks[].relay.clock_sync_period":     {doc: "Time between clock-sync rounds after the first (at least 1s).", def: "30s"},
	"sinks[].relay.batch_size":            {doc: "Bytes per batch.", def: "256KiB"},
	"sinks[].relay.max_batches":           {doc: "Unacknowledged batches kept for resend; beyond them, packets are dropped and counted.", def: "64"},
	"sinks[].relay.backoff_min":           {doc: "First reconnect delay, doubled per failure with ±50 % jitter.", def: "50ms"},
	"sinks[].relay.backoff_max":           {doc: "Longest reconnect delay.", def: "5s"},
	"sinks[].relay.dial_timeout":          {doc: "Bound on connecting and the hello exchange.", def: "5s"},
	"sinks[].relay.close_timeout":         {doc: "How long the end of a session waits for acknowledgements.", def: "5s"},
	"sinks[].relay.first_contact_timeout": {doc: "How long the destination may stay unreachable before it was ever reached; then the sink fails (on_error applies) instead of filling its queue.", def: "10s"},
	"sinks[].relay.tls":                   {doc: "Use TLS; implied by any tls_* key."},
	"sinks[].relay.tls_ca_file":           {doc: "CA certificate that verifies the receiver; default: the system roots."},
	"sinks[].relay.tls_cert_file":         {doc: "Client certificate, with tls_key_file."},
	"sinks[].relay.tls_key_file":          {doc: "Client key, with tls_cert_file."},
	"sinks[].relay.tls_server_name":       {doc: "Name to verify in the receiver's certificate instead of the address's host."},

	"sinks[].nats":                       {doc: "The NATS sink: publishes batches to a NATS JetStream subject with deduplication ids (docs/sinks.md)."},
	"sinks[].nats.url":                   {doc: "Required: nats://host:4222 (comma-separated for a cluster)."},
	"sinks[].nats.subject":               {doc: "Required: the subject batches are published to."},
	"sinks[].nats.stream":                {doc: "The JetStream stream to create with create_stream.", def: "TRACEPIPE"},
	"sinks[].nats.create_stream":         {doc: "Create the stream (file storage) if none listens on the subject."},
	"sinks[].nats.machine_id":            {doc: "This machine's id in merged traces; default: a hash of /etc/machine-id."},
	"sinks[].nats.hostname":              {doc: "This machine's name in merged traces; default: the host name."},
	"sinks[].nats.batch_size":            {doc: "Bytes per message, at most the server's max_payload.", def: "256KiB"},
	"sinks[].nats.max_batches":           {doc: "Unacknowledged batches kept for resend; beyond them, packets are dropped and counted.", def: "64"},
	"sinks[].nats.max_inflight":          {doc: "Publishes awaiting their acknowledgement.", def: "16"},
	"sinks[].nats.ack_timeout":           {doc: "Bound on a publish's acknowledgement.", def: "5s"},
	"sinks[].nats.backoff_min":           {doc: "First retry delay, doubled per failure with ±50 % jitter.", def: "50ms"},
	"sinks[].nats.backoff_max":           {doc: "Longest retry delay.", def: "5s"},
	"sinks[].nats.close_timeout":         {doc: "How long the end of a session waits for acknowledgements.", def: "5s"},
	"sinks[].nats.first_contact_timeout": {doc: "How long the destination may stay unreachable before it was ever reached; then the sink fails (on_error applies) instead of filling its queue.", def: "10s"},
}

// Schema lists every configuration key, parents before children, in the
// order of the struct fields (sink sections by type name). It reports an
// error when a key has no description in keyDocs or a description names
// no key; the sink types are the registered ones (a program that links
// sinks/relay and sinks/natsink sees them).
func Schema() ([]SchemaKey, error) {
	defaults := &Config{Buffers: []BufferConfig{{}}, DataSources: []DataSourceConfig{{}}}
	defaults.SetDefaults()
	var keys []SchemaKey
	walkSchema(reflect.TypeFor[Config](), reflect.ValueOf(defaults).Elem(), "", &keys)

	// The sink sections, from the factories themselves.
	for _, typ := range sinks.Types() {
		sec, _ := sinks.SectionKeysOf(typ)
		keys = append(keys, SchemaKey{Path: "sinks[]." + typ, Type: "section", SinkTypes: []string{typ}})
		for _, k := range sec {
			keys = append(keys, SchemaKey{Path: "sinks[]." + typ + "." + k.Name, Type: k.Kind, Enum: k.Enum, SinkTypes: []string{typ}})
		}
	}

	var problems []string
	seen := map[string]bool{}
	for i := range keys {
		k := &keys[i]
		seen[k.Path] = true
		d, ok := keyDocs[k.Path]
		if !ok {
			problems = append(problems, k.Path+": no description in keyDocs")
			continue
		}
		k.Doc = d.doc
		if d.typ != "" {
			k.Type = d.typ
		}
		if d.def != "" {
			k.Default = d.def
		}
		if d.enum != nil {
			k.Enum = d.enum
		}
		if strings.HasPrefix(k.Path, "sinks[].") {
			switch name := strings.TrimPrefix(k.Path, "sinks[]."); name {
			case "type":
				k.Enum = sinks.Types()
			case "path", "compression", "max_file_size", "fsync_period":
				k.SinkTypes = []string{sinks.SinkTypeFile}
			}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(keyDocs)) {
		if !seen[p] && !isUnregisteredSinkKey(p) {
			problems = append(problems, p+": described in keyDocs but no such key")
		}
	}
	if len(problems) > 0 {
		return keys, fmt.Errorf("pipeline: config schema: %s", strings.Join(problems, "; "))
	}
	return keys, nil
}

// isUnregisteredSinkKey reports a description of a sink type this program
// does not link (sinks/relay and sinks/natsink register from init).
func isUnregisteredSinkKey(path string) bool {
	rest, ok := strings.CutPrefix(path, "sinks[].")
	if !ok {
		return false
	}
	typ, _, _ := strings.Cut(rest, ".")
	if _, registered := sinks.Lookup(typ); registered {
		return false
	}
	t := reflect.TypeFor[sinks.Config]()
	for i := range t.NumField() {
		if t.Field(i).Tag.Get("koanf") == typ {
			return false
		}
	}
	return true
}

// walkSchema appends the keys of struct type t (koanf tags) under prefix;
// def holds the defaults (a value of t, or invalid where there is none).
func walkSchema(t reflect.Type, def reflect.Value, prefix string, out *[]SchemaKey) {
	for i := range t.NumField() {
		f := t.Field(i)
		name := f.Tag.Get("koanf")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		path := prefix + name
		var fv reflect.Value
		if def.IsValid() {
			fv = def.Field(i)
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
			if fv.IsValid() {
				if fv.IsNil() {
					fv = reflect.Value{}
				} else {
					fv = fv.Elem()
				}
			}
		}
		k := SchemaKey{Path: path}
		switch {
		case ft == reflect.TypeFor[time.Duration]():
			k.Type = "duration"
		case ft.Kind() == reflect.Struct:
			k.Type = "section"
			*out = append(*out, k)
			walkSchema(ft, fv, path+".", out)
			continue
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			k.Type = "list"
			*out = append(*out, k)
			var ev reflect.Value
			if fv.IsValid() && fv.Len() > 0 {
				ev = fv.Index(0)
			}
			if ft.Elem() == reflect.TypeFor[sinks.Config]() {
				ev = reflect.Value{} // sink defaults are the sink's, see keyDocs
			}
			walkSchema(ft.Elem(), ev, path+"[].", out)
			continue
		case ft.Kind() == reflect.Map:
			k.Type = "map"
		case ft.Kind() == reflect.Bool:
			k.Type = "boolean"
		case ft.Kind() == reflect.String:
			k.Type = "string"
		case ft.Kind() >= reflect.Int && ft.Kind() <= reflect.Uint64:
			k.Type = "integer"
		case ft.Kind() == reflect.Float32 || ft.Kind() == reflect.Float64:
			k.Type = "number"
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.String:
			k.Type = "list of strings"
		default:
			k.Type = ft.String()
		}
		if fv.IsValid() && !fv.IsZero() {
			if d, ok := fv.Interface().(time.Duration); ok {
				k.Default = d.String()
			} else {
				k.Default = fmt.Sprint(fv.Interface())
			}
		}
		*out = append(*out, k)
	}
}

// durationPattern matches a Go duration string ("10s", "1m30s", "-1s").
const durationPattern = `^[-+]?([0-9]+(\.[0-9]*)?(ns|us|µs|ms|s|m|h))+$`

// byteSizePattern matches a byte count with an optional unit ("64MiB").
const byteSizePattern = `^\s*[0-9]+\s*([kKmMgGtT]i?[bB]|[bB])?\s*$`

// JSONSchema renders the schema as a JSON Schema (draft-07) document that
// YAML and JSON editors use for completion and checks.
func JSONSchema() ([]byte, error) {
	keys, err := Schema()
	if err != nil {
		return nil, err
	}
	root := schemaObject("tracepipe session configuration")
	root["$schema"] = "http://json-schema.org/draft-07/schema#"
	nodes := map[string]map[string]any{"": root}
	for _, k := range keys {
		parent, name := splitSchemaPath(k.Path)
		pn := nodes[parent]
		if pn == nil {
			return nil, fmt.Errorf("pipeline: config schema: %s has no parent %q", k.Path, parent)
		}
		n := jsonType(k)
		switch k.Type {
		case "section":
			nodes[k.Path] = n
		case "list":
			item := schemaObject("")
			n["items"] = item
			nodes[k.Path+"[]"] = item
		}
		props := pn["properties"].(map[string]any)
		props[name] = n
	}
	return json.MarshalIndent(root, "", "  ")
}

func schemaObject(desc string) map[string]any {
	m := map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{}}
	if desc != "" {
		m["description"] = desc
	}
	return m
}

// splitSchemaPath splits "a.b[].c" into "a.b[]" and "c".
func splitSchemaPath(p string) (parent, name string) {
	i := strings.LastIndexByte(p, '.')
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}

func jsonType(k SchemaKey) map[string]any {
	var n map[string]any
	switch k.Type {
	case "section":
		n = schemaObject("")
	case "list":
		n = map[string]any{"type": "array"}
	case "map":
		n = map[string]any{"type": "object"}
	case "boolean":
		n = map[string]any{"type": "boolean"}
	case "integer":
		n = map[string]any{"type": "integer"}
	case "number":
		n = map[string]any{"type": "number"}
	case "duration":
		// A Go duration string; a bare 0 (0 in every unit) is accepted too.
		n = map[string]any{"oneOf": []any{
			map[string]any{"type": "string", "pattern": durationPattern},
			map[string]any{"const": 0},
		}}
	case "byte size":
		n = map[string]any{"oneOf": []any{
			map[string]any{"type": "integer", "minimum": 0},
			map[string]any{"type": "string", "pattern": byteSizePattern},
		}}
	case "list of strings":
		n = map[string]any{"type": "array", "items": map[string]any{"type": "string"}}
	default:
		n = map[string]any{"type": "string"}
	}
	desc := k.Doc
	if k.Default != "" {
		desc += " Default: " + k.Default + "."
	}
	if len(k.SinkTypes) > 0 {
		desc += " Sink types: " + strings.Join(k.SinkTypes, ", ") + "."
	}
	n["description"] = desc
	if len(k.Enum) > 0 {
		e := make([]any, len(k.Enum))
		for i, v := range k.Enum {
			e[i] = v
		}
		n["enum"] = e
	}
	return n
}

// ReferenceMarkdown renders the schema as the configuration reference
// (docs/configuration-reference.md): one table per top-level section.
func ReferenceMarkdown() ([]byte, error) {
	keys, err := Schema()
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	b.WriteString("<!-- Generated by `make docs` (tracepipe config reference) from the code's config schema\n" +
		"     (config/config_schema.go and each sink type's factory). Do not edit: a test fails when\n" +
		"     this file and the code disagree. -->\n\n")
	b.WriteString("# Configuration reference\n\n")
	b.WriteString("Every key a tracepipe config file may hold, with its type and default. Durations are Go\n" +
		"duration strings (`500ms`, `10s`, `1m30s`); a bare number is an error. A byte size is an\n" +
		"integer or a string with a unit (`64MiB`, `1GB`). `[]` stands for any list index. Keys under\n" +
		"`sinks[]` say which sink types take them. An editor that reads JSON Schema can check configs\n" +
		"with `tracepipe config schema` (docs/configuration.md says how).\n\n")
	// One table for the top-level scalars, one per top-level section or
	// list, one per sink type's section.
	group := func(k SchemaKey) string {
		top, rest, nested := strings.Cut(k.Path, ".")
		if top == "sinks[]" {
			typ, _, _ := strings.Cut(rest, ".")
			if _, ok := sinks.Lookup(typ); ok {
				return "sinks[]." + typ
			}
		}
		if nested || k.Type == "section" || k.Type == "list" {
			return strings.TrimSuffix(top, "[]")
		}
		return "top level"
	}
	rank := map[string]int{"top level": 0}
	for _, k := range keys {
		if g := group(k); rank[g] == 0 && g != "top level" {
			rank[g] = len(rank)
		}
	}
	slices.SortStableFunc(keys, func(a, b SchemaKey) int { return rank[group(a)] - rank[group(b)] })
	section := ""
	for _, k := range keys {
		if g := group(k); g != section {
			section = g
			fmt.Fprintf(&b, "\n## %s\n\n", g)
			b.WriteString("| key | type | default | sink types | description |\n|---|---|---|---|---|\n")
		}
		def := "—"
		if k.Default != "" {
			def = "`" + k.Default + "`"
		}
		st := "—"
		if strings.HasPrefix(k.Path, "sinks[].") {
			st = "all"
			if len(k.SinkTypes) > 0 {
				st = strings.Join(k.SinkTypes, ", ")
			}
		}
		doc := k.Doc
		if len(k.Enum) > 0 {
			var vs []string
			for _, v := range k.Enum {
				if v != "" {
					vs = append(vs, "`"+v+"`")
				}
			}
			doc += " One of: " + strings.Join(vs, ", ") + "."
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", k.Path, k.Type, def, st, strings.ReplaceAll(doc, "|", "\\|"))
	}
	return []byte(b.String()), nil
}
