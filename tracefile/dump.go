package tracefile

import (
	"encoding/hex"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tracepipe/tracepipe/internal/wire"

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
	it := wire.Fields(b)
	for it.Next() {
		if sb.Len() > maxText {
			return
		}
		f := it.Field()
		name := fieldName(f.Num, top)
		switch f.Type {
		case protowire.VarintType:
			sb.WriteString(indent + name + ": " + strconv.FormatUint(f.Varint, 10))
			if top && f.Num == FieldPreviousPacketDropped {
				sb.WriteString(" (" + LossReasonString(uint32(f.Varint)) + ")")
			}
			sb.WriteByte('\n')
		case protowire.Fixed32Type:
			sb.WriteString(indent + name + ": 0x" + strconv.FormatUint(f.Varint, 16) + " (fixed32)\n")
		case protowire.Fixed64Type:
			sb.WriteString(indent + name + ": 0x" + strconv.FormatUint(f.Varint, 16) + " (fixed64)\n")
		case protowire.BytesType:
			switch v := f.Bytes; {
			case len(v) > 0 && printable(v):
				sb.WriteString(indent + name + ": " + strconv.Quote(string(v)) + "\n")
			case depth < dumpMaxDepth && isMessage(v):
				sb.WriteString(indent + name + " {\n")
				dumpMessage(sb, v, depth+1, false, maxText)
				sb.WriteString(indent + "}\n")
			default:
				sb.WriteString(indent + name + ": " + hexOf(v) + "\n")
			}
		default:
			sb.WriteString(indent + name + ": <unsupported wire type " + strconv.Itoa(int(f.Type)) + "> " + hexOf(b[f.ValOff:]) + "\n")
			return
		}
	}
	if we := it.Malformed(); we != nil && sb.Len() <= maxText {
		rest := b[we.Off:]
		if we.Num == 0 {
			sb.WriteString(indent + "<malformed: " + we.Err.Error() + "> " + hexOf(rest) + "\n")
			return
		}
		val := b[we.ValOff:]
		name := fieldName(we.Num, top)
		switch we.Type {
		case protowire.VarintType:
			sb.WriteString(indent + name + ": <malformed varint>\n")
		case protowire.Fixed32Type:
			sb.WriteString(indent + name + ": <malformed fixed32>\n")
		case protowire.Fixed64Type:
			sb.WriteString(indent + name + ": <malformed fixed64>\n")
		case protowire.BytesType:
			sb.WriteString(indent + name + ": <malformed length> " + hexOf(val) + "\n")
		default:
			sb.WriteString(indent + name + ": <unsupported wire type " + strconv.Itoa(int(we.Type)) + "> " + hexOf(val) + "\n")
		}
	}
}

// fieldName names field num for the dump: by name at the packet's top
// level, by number below.
func fieldName(num protowire.Number, top bool) string {
	if top {
		return PacketFieldName(int32(num))
	}
	return strconv.Itoa(int(num))
}

// isMessage reports whether b parses as a sequence of well-formed fields
// (groups excluded).
func isMessage(b []byte) bool {
	it := wire.Fields(b)
	for it.Next() {
		if t := it.Field().Type; t == protowire.StartGroupType || t == protowire.EndGroupType {
			return false
		}
	}
	return it.Err() == nil
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
