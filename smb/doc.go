// Package smb owns the shared memory buffer (SMB) through which a producer
// hands trace data to the service, byte-compatible with Perfetto's shared
// memory ABI: page and chunk headers, chunk states and their atomic
// transitions, the producer-side arbiter and TraceWriter (packet framing,
// fragmentation, size patching, drop/stall policy), and the service-side
// chunk reader and flush scraper.
//
// Everything the service reads from an SMB is untrusted: the reader validates
// every index, size, state and fragment and reports malformed input as a
// counted reason. This package must not import anything but the standard
// library, golang.org/x/sys and google.golang.org/protobuf/encoding/protowire
// (wire helpers only), and must not know about trace buffers,
// sinks or configuration.
package smb
