// Package tracefile owns the on-disk Perfetto trace format as tracepipe
// reads and writes it: the Trace framing (repeated field 1, one TracePacket
// each), the subset of TracePacket fields tracepipe emits, and the loss
// report behind `tracepipe stats`.
//
// What lives here:
//   - framing: AppendRecord / Writer, and Reader, which streams packets
//     with their offsets, skips other top-level fields and reads gzip- or
//     zstd-compressed files transparently; with MaxPacketBuffer it streams
//     a longer packet field by field, discarding the fields that do not
//     fit unread (elide.go) and saying so in the Record;
//   - protowire-style appenders for what the service writes (trusted
//     fields, service packet header, clock snapshots, provenance, uuid,
//     lifecycle events, TraceStats) and small decoders (DecodePacket,
//     DecodeTraceStats);
//   - LossReport / WriteLossTable (`tracepipe stats`) and Summarize /
//     Summary.WriteText (`tracepipe inspect`), whose per-sequence rows are
//     bounded (SummaryOptions.MaxSequences; the rest are added up in one
//     row, their number estimated).
//
// Trace files come from users and are untrusted: the reader reports a
// malformed record with its byte offset and never allocates more than the
// record it was given (checked against MaxRecordSize, and against the bytes
// left when the input size is known, before any allocation). This package
// does no network I/O and knows nothing of buffers or sessions.
package tracefile
