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
//   - Predicate: a test on DecodePacket's fields (comparisons with
//     literals, and, or, not), which sink filters lower to
//     (sinks/celfilter) and sinks.Filter evaluates per packet without an
//     allocation;
//   - ReadFile: a trace file by path, record by record, a truncation
//     reported to the caller rather than printed; ReadFilePackets, the
//     same with each record's top level decoded and the undecodable ones
//     counted; PacketSelector, which packets of a trace belong to a
//     sequence or a data source (`tracepipe protovm apply`);
//   - LossReport / WriteLossTable and the stats scan behind `tracepipe
//     stats` (ScanStats / StatsScan: the last TraceStats, each machine's,
//     the flagged packets, and the --fail-on-loss verdict LossSummary);
//     Summarize / Summary.WriteText (`tracepipe inspect`), whose
//     per-sequence rows are bounded (SummaryOptions.MaxSequences; the rest
//     are added up in one row, their number estimated);
//   - rotated sets (traceset.go): the file names a rotating sink writes
//     (RotatedFileName, shared with the file sink so that writer and
//     readers agree), RotationOrder, and a set read as one trace
//     (StatsScan.Add, MergeSummary).
//
// Trace files come from users and are untrusted: the reader reports a
// malformed record with its byte offset and never allocates more than the
// record it was given (checked against MaxRecordSize, and against the bytes
// left when the input size is known, before any allocation). This package
// does no network I/O, knows nothing of buffers, sessions or sinks (it
// imports none of them), and writes text only to a writer it is given
// (WriteLossTable, Summary.WriteText, ...): the CLI words warnings and
// chooses exit codes.
package tracefile
