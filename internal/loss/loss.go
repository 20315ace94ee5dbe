// Package loss defines, once, the data-loss reason bits carried in a
// TracePacket's previous_packet_dropped (trace-buffer-v2.md §8) and their
// names. It imports only the standard library so that buffer (std only)
// and tracefile (protobuf only) can both refer to it; it owns nothing else.
package loss

import "strconv"

// Reason bits. Present is set with any other bit.
const (
	Present               = 1
	ReadGap               = 2
	ChunkCorrupted        = 4
	OrphanContinuation    = 8
	ReassemblyGap         = 16
	ReassemblyBrokenChain = 32
	Overwrite             = 64
	WriterAbort           = 128
	SMBFull               = 256 // set by producers, never by the buffer
)

var names = []string{
	"PRESENT", "READ_GAP", "CHUNK_CORRUPTED", "ORPHAN_CONTINUATION", "REASSEMBLY_GAP",
	"REASSEMBLY_BROKEN_CHAIN", "OVERWRITE", "WRITER_ABORT", "SMB_FULL",
}

// String renders a bitmask as its reason names joined by "|" (e.g. 65 →
// "PRESENT|OVERWRITE"); unknown bits appear as "bit<n>". Zero renders as
// "0".
func String(mask uint32) string {
	if mask == 0 {
		return "0"
	}
	var out []byte
	for bit := 0; bit < 32; bit++ {
		if mask&(1<<bit) == 0 {
			continue
		}
		if len(out) > 0 {
			out = append(out, '|')
		}
		if bit < len(names) {
			out = append(out, names[bit]...)
		} else {
			out = append(out, "bit"...)
			out = strconv.AppendInt(out, int64(bit), 10)
		}
	}
	return string(out)
}
