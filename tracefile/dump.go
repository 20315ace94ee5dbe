package tracefile

import (
	"encoding/hex"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// Limits of [DumpPacket]'s output.
const (
	dumpMaxDepth = 12
	dumpMaxBytes = 64   // bytes of an opaque field shown in hex
	dumpMaxText  = 8192 // characters of dump per packet
)

// DumpPacket renders a TracePacket as indented text without a schema:
// top-level fields by name (see [PacketFieldName]), nested fields by
// number. A length-delimited field prints as a quoted string when it is
// printable UTF-8, as a nested message when it parses as one, else as hex.
// Output is capped at about 8 KiB; it never fails on malformed input (the
// bad part is shown as hex with a note).
func DumpPacket(packet []byte) string { return DumpPacketLimit(packet, dumpMaxText) }

// DumpPacketLimit is DumpPacket with the output capped at about maxText
// characters instead of 8 KiB (`protovm apply` prints whole VM states).
func DumpPacketLimit(packet []byte, maxText int) string {
	var sb strings.Builder
	dumpMessage(&sb, packet, 0, true, maxText)
	s := sb.String()
	if len(s) > maxText {
		s = s[:maxText] + "\n… (dump truncated)\n"
	}
	return s
}

func dumpMessage(sb *strings.Builder, b []byte, depth int, top bool, maxText int) {
	indent := strings.Repeat("  ", depth)
	for len(b) > 0 {
		if sb.Len() > maxText {
			return
		}
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			sb.WriteString(indent + "<malformed: " + protowire.ParseError(n).Error() + "> " + hexOf(b) + "\n")
			return
		}
		name := strconv.Itoa(int(num))
		if top {
			name = PacketFieldName(int32(num))
		}
		rest := b[n:]
		switch typ {
		case protowire.VarintType:
			v, m := protowire.ConsumeVarint(rest)
			if m < 0 {
				sb.WriteString(indent + name + ": <malformed varint>\n")
				return
			}
			sb.WriteString(indent + name + ": " + strconv.FormatUint(v, 10))
			if top && num == FieldPreviousPacketDropped {
				sb.WriteString(" (" + LossReasonString(uint32(v)) + ")")
			}
			sb.WriteByte('\n')
			b = rest[m:]
		case protowire.Fixed32Type:
			v, m := protowire.ConsumeFixed32(rest)
			if m < 0 {
				sb.WriteString(indent + name + ": <malformed fixed32>\n")
				return
			}
			sb.WriteString(indent + name + ": 0x" + strconv.FormatUint(uint64(v), 16) + " (fixed32)\n")
			b = rest[m:]
		case protowire.Fixed64Type:
			v, m := protowire.ConsumeFixed64(rest)
			if m < 0 {
				sb.WriteString(indent + name + ": <malformed fixed64>\n")
				return
			}
			sb.WriteString(indent + name + ": 0x" + strconv.FormatUint(v, 16) + " (fixed64)\n")
			b = rest[m:]
		case protowire.BytesType:
			v, m := protowire.ConsumeBytes(rest)
			if m < 0 {
				sb.WriteString(indent + name + ": <malformed length> " + hexOf(rest) + "\n")
				return
			}
			switch {
			case len(v) > 0 && printable(v):
				sb.WriteString(indent + name + ": " + strconv.Quote(string(v)) + "\n")
			case depth < dumpMaxDepth && isMessage(v):
				sb.WriteString(indent + name + " {\n")
				dumpMessage(sb, v, depth+1, false, maxText)
				sb.WriteString(indent + "}\n")
			default:
				sb.WriteString(indent + name + ": " + hexOf(v) + "\n")
			}
			b = rest[m:]
		default:
			sb.WriteString(indent + name + ": <unsupported wire type " + strconv.Itoa(int(typ)) + "> " + hexOf(rest) + "\n")
			return
		}
	}
}

// isMessage reports whether b parses as a sequence of well-formed fields
// (groups excluded).
func isMessage(b []byte) bool {
	for len(b) > 0 {
		_, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ == protowire.StartGroupType || typ == protowire.EndGroupType {
			return false
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(0, typ, b)
		if m < 0 {
			return false
		}
		b = b[m:]
	}
	return true
}

func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if r < 0x20 && r != '\t' && r != '\n' || r == 0x7f || r == utf8.RuneError {
			return false
		}
	}
	return true
}

func hexOf(b []byte) string {
	if len(b) <= dumpMaxBytes {
		return "0x" + hex.EncodeToString(b)
	}
	return "0x" + hex.EncodeToString(b[:dumpMaxBytes]) + "… (" + strconv.Itoa(len(b)) + " bytes)"
}
