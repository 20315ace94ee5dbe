package tracefile

import (
	"encoding/hex"
	"math"
	"strconv"
	"strings"
	"time"
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

// DumpPacket renders a TracePacket as indented text: fields by name for
// every message tracepipe writes and the Perfetto messages its producers
// commonly emit (names.go), enum values by name, timestamps also in
// seconds; a field it does not know prints by number. A length-delimited
// field without a description prints as a quoted string when it is
// printable UTF-8, as a nested message when it parses as one, else as hex.
// Output is capped at about 8 KiB; it never fails on malformed input (the
// bad part is shown as hex with a note).
func DumpPacket(packet []byte) string { return DumpPacketLimit(packet, dumpMaxText) }

// DumpPacketLimit is DumpPacket with the output capped at about maxText
// characters instead of 8 KiB (`protovm apply` prints whole VM states).
func DumpPacketLimit(packet []byte, maxText int) string {
	var sb strings.Builder
	dumpMessage(&sb, packet, 0, packetDesc, maxText)
	s := sb.String()
	if len(s) > maxText {
		s = s[:maxText] + "\n… (dump truncated)\n"
	}
	return s
}

func dumpMessage(sb *strings.Builder, b []byte, depth int, desc *msgDesc, maxText int) {
	indent := strings.Repeat("  ", depth)
	wall := desc == clockDesc && isWallClock(b)
	it := wire.Fields(b)
	for it.Next() {
		if sb.Len() > maxText {
			return
		}
		f := it.Field()
		fd := desc.field(f.Num)
		name := fd.name
		switch f.Type {
		case protowire.VarintType:
			if wall && fd.kind == kindNanos {
				// A REALTIME clock's reading is wall time: a date says more.
				sb.WriteString(indent + name + ": " + strconv.FormatUint(f.Varint, 10) + " (" +
					time.Unix(0, int64(f.Varint)).UTC().Format("2006-01-02 15:04:05.000000000 UTC") + ")\n")
				continue
			}
			sb.WriteString(indent + name + ": " + varintText(fd, f.Varint) + "\n")
		case protowire.Fixed32Type:
			sb.WriteString(indent + name + ": 0x" + strconv.FormatUint(f.Varint, 16) + " (fixed32)\n")
		case protowire.Fixed64Type:
			if fd.kind == kindDouble {
				sb.WriteString(indent + name + ": " + strconv.FormatFloat(math.Float64frombits(f.Varint), 'g', -1, 64) + "\n")
			} else {
				sb.WriteString(indent + name + ": 0x" + strconv.FormatUint(f.Varint, 16) + " (fixed64)\n")
			}
		case protowire.BytesType:
			switch v := f.Bytes; {
			case fd.kind == kindUUIDBytes && len(v) == 16:
				sb.WriteString(indent + name + ": " + uuidText(v) + "\n")
			case fd.msg != nil && depth < dumpMaxDepth && isMessage(v):
				sb.WriteString(indent + name + " {\n")
				dumpMessage(sb, v, depth+1, fd.msg, maxText)
				sb.WriteString(indent + "}\n")
			case fd.kind == kindString && utf8.Valid(v):
				sb.WriteString(indent + name + ": " + strconv.Quote(string(v)) + "\n")
			case fd.msg == nil && len(v) > 0 && printable(v):
				sb.WriteString(indent + name + ": " + strconv.Quote(string(v)) + "\n")
			case fd.msg == nil && fd.kind == kindPlain && depth < dumpMaxDepth && isMessage(v):
				sb.WriteString(indent + name + " {\n")
				dumpMessage(sb, v, depth+1, nil, maxText)
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
		name := desc.field(we.Num).name
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

// isWallClock reports whether a ClockSnapshot.Clock names a REALTIME
// clock (REALTIME or REALTIME_COARSE), whose timestamps are wall time.
func isWallClock(clock []byte) bool {
	it := wire.Fields(clock)
	for it.Next() {
		if f := it.Field(); f.Num == 1 && f.Type == protowire.VarintType {
			return f.Varint == 1 || f.Varint == 2
		}
	}
	return false
}

// field describes field num of d; a field d does not know (or a nil d)
// gets its number as its name ("field_<n>" at the packet's top level).
func (d *msgDesc) field(num protowire.Number) fieldDesc {
	if d != nil {
		if fd, ok := d.fields[num]; ok && fd.name != "" {
			return fd
		}
	}
	if d == packetDesc {
		return fieldDesc{name: PacketFieldName(int32(num))}
	}
	return fieldDesc{name: strconv.Itoa(int(num))}
}

// varintText renders a varint by its field's kind.
func varintText(fd fieldDesc, v uint64) string {
	n := strconv.FormatUint(v, 10)
	if name, ok := fd.enum[v]; ok {
		return name + " (" + n + ")"
	}
	switch fd.kind {
	case kindBool:
		if v == 1 {
			return "true"
		}
		if v == 0 {
			return "false"
		}
	case kindSigned:
		return strconv.FormatInt(int64(v), 10)
	case kindNanos:
		return n + " (" + NanosText(int64(v)) + ")"
	case kindBoottime:
		return n + " (" + NanosText(int64(v)) + " since boot)"
	case kindSeqFlags:
		var fl []string
		if v&1 != 0 {
			fl = append(fl, "INCREMENTAL_STATE_CLEARED")
		}
		if v&2 != 0 {
			fl = append(fl, "NEEDS_INCREMENTAL_STATE")
		}
		if rest := v &^ 3; rest != 0 {
			fl = append(fl, "0x"+strconv.FormatUint(rest, 16))
		}
		if len(fl) > 0 {
			return n + " (" + strings.Join(fl, "|") + ")"
		}
	case kindLossBits:
		return n + " (" + LossReasonString(uint32(v)) + ")"
	}
	return n
}

// NanosText renders nanoseconds as seconds for people: "3.018916129s",
// "10m27.256s", "850µs".
func NanosText(ns int64) string {
	d := time.Duration(ns)
	if d >= time.Minute || d <= -time.Minute {
		d = d.Round(time.Millisecond)
	}
	return d.String()
}

func uuidText(b []byte) string {
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
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
