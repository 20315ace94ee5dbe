// Package buffer owns the central TraceBuffer, a Go implementation of
// Perfetto's TraceBufferV2: it copies untrusted chunks, applies patches,
// keeps per-sequence order, reassembles fragmented packets, overwrites
// (ring buffer) or discards when full, hands overwritten packets to an
// optional observer, and counts every data loss in its statistics.
//
// A TraceBuffer does no I/O, starts no goroutines and is not safe for
// concurrent use: its owner serialises every call. Its memory is mapped
// outside the Go heap (mem.go) and its owner must Close it: the pages go
// back to the OS at once, and the Go heap holds only the bookkeeping. The
// same allocator serves a session's other large fixed allocations (Mem:
// the pipeline's output batches). It must not import anything outside the
// standard library (ProtoVM plugs in through the overwrite observer, not
// an import).
package buffer
