// Package tpimport predicts what Perfetto's trace_processor will do with a
// trace file, following the import rules distilled in
// reference/trace-processor-import.md: which packets it skips per sequence
// and why, which interned ids it cannot resolve, which tracks it cannot
// attribute, which timestamps it cannot convert, which packets a ProtoVM
// replaces by its state (run on tracepipe's real protovm package), and the
// error, data_loss and notice stats it raises. It also checks that every
// payload whose message type is known decodes strictly, as protoc --decode
// and Python protobuf would.
//
// What it owns: the model of trace_processor's tokenization phase (file
// order, per-packet steps of §0) and the end-of-import stats (§6). It is
// the project's oracle: `tracepipe check`, `tracepipe protovm eval` and
// the tests of the service use it.
//
// Not modelled (trace_processor does more than this): the packets inside
// compressed_packets (reported as not_modelled), legacy TrackEvent
// timestamps relative to a thread descriptor, incremental counters, iid
// lookups other than event names and categories, the sorter's out-of-order
// and negative-timestamp drops, and everything of the parsing phase beyond
// track resolution.
//
// Several machines (§9, machines.go, from trace_processor ec5d16b's
// source): packets are routed by machine_id; a machine is adopted as the
// host when the host has no packet of its own before it; a remote
// machine's clock snapshot takes the trace clock when that machine has
// converted no timestamp yet; a remote machine's first conversion bridges
// its BOOTTIME to the trace clock by assumption when no remote_clock_sync
// relates them (their offsets computed as trace_processor does,
// RemoteClockOffsets).
//
// Memory is bounded (Options): at most MaxSequences sequences keep state of
// their own (the packets of further ones are checked against one summary
// row per machine, their count estimated and reported as
// sequences_summarised), and at most MaxPacketBuffer bytes of a packet are
// held (fields of a longer packet are skipped unread and reported as
// packet_fields_skipped).
//
// What it must not do: write traces, hold whole traces in memory (a
// Checker keeps per-sequence state and sets of ids, never packets), or
// reach the network. It reads field numbers from reference/trace-format.md
// and keeps no copy of Perfetto's .proto files.
package tpimport
