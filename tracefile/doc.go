// Package tracefile owns the on-disk Perfetto trace format as tracepipe
// reads and writes it: the Trace framing (repeated field 1, one TracePacket
// each), the subset of TracePacket fields tracepipe emits, and the loss
// report behind `tracepipe stats`.
//
// Trace files come from users and are untrusted: the reader reports a
// malformed record with its byte offset and never allocates more than the
// record it was given. This package does no network I/O and knows nothing
// of buffers or sessions.
package tracefile
