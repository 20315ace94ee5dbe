package builtin

import (
	"strconv"
	"sync"

	"github.com/tracepipe/tracepipe/internal/wire"

	"google.golang.org/protobuf/encoding/protowire"
)

// SyntheticName is the registered name of the load generator.
const SyntheticName = "tracepipe.synthetic"

// Limits of the synthetic source's config keys.
const (
	SyntheticMaxWriters    = 1024
	SyntheticMinPacketSize = 64
	SyntheticMaxPacketSize = 1 << 20
	SyntheticMaxNames      = 1_000_000
)

// DefaultSyntheticTrackUUIDBase is the first track uuid of a synthetic
// instance whose TrackUUIDBase is 0 ("SYNT" in the top bytes).
const DefaultSyntheticTrackUUIDBase = 0x53594e5400000000

// DefaultSyntheticTimestampBase is a generator's deterministic timestamp of
// packet 0 when SyntheticConfig.TimestampBase is zero.
const DefaultSyntheticTimestampBase = 1_000_000

// SyntheticConfig is the parsed config of a tracepipe.synthetic instance.
// The zero value is not valid; start from DefaultSyntheticConfig or
// ParseSyntheticConfig.
type SyntheticConfig struct {
	// Writers is the number of writers (sequences), each with its own
	// goroutine (key writers, 1..1024, default 1).
	Writers int
	// Rate is packets per second per writer, 0 = as fast as possible
	// (key rate, default 0).
	Rate int64
	// PacketSize is the approximate encoded size of each TrackEvent packet
	// (key packet_size, 64..1 MiB, default 200). Descriptor packets are
	// smaller; a packet whose fields alone exceed it is not padded.
	PacketSize int
	// MaxPackets is the number of TrackEvent packets per writer, 0 = until
	// stopped (key max_packets, default 0). Descriptor packets come on top.
	MaxPackets int64
	// Names is the number of distinct interned event names
	// (key names, 1..1_000_000, default 32).
	Names int
	// CounterEvery makes every Nth TrackEvent packet a counter event, 0 =
	// never (key counter_every, default 8).
	CounterEvery int
	// DeterministicTimestamps gives TrackEvent packet i the timestamp
	// TimestampBase + i*1000 (key deterministic_timestamps, default false).
	DeterministicTimestamps bool
	// TimestampBase is not a config key: the BOOTTIME of deterministic
	// packet 0. Zero means DefaultSyntheticTimestampBase for the
	// generator; NewSynthetic replaces a zero base with the boot time at
	// creation (rounded down to the millisecond), so that deterministic
	// events sit on the trace's real clock, next to the session's other
	// packets, instead of in the first milliseconds after boot.
	TimestampBase uint64

	// TrackUUIDBase is not a config key: writer w's slice track has uuid
	// TrackUUIDBase+2w and its counter track TrackUUIDBase+2w+1. Zero means
	// DefaultSyntheticTrackUUIDBase for the generator; NewSynthetic replaces
	// a zero base with a random one unless DeterministicTimestamps is set,
	// so that two instances in one trace do not share tracks.
	TrackUUIDBase uint64

	// trigger: keys trigger, trigger_after_packets, trigger_after_ms,
	// trigger_every_ms (synthetic_trigger.go).
	trigger syntheticTrigger
}

// DefaultSyntheticConfig is the config of an empty or nil map.
func DefaultSyntheticConfig() SyntheticConfig {
	return SyntheticConfig{Writers: 1, PacketSize: 200, Names: 32, CounterEvery: 8}
}

// ParseSyntheticConfig validates a tracepipe.synthetic config map. Every
// problem is reported (errors.Join), each message starting with its key.
func ParseSyntheticConfig(m map[string]any) (SyntheticConfig, error) {
	c := DefaultSyntheticConfig()
	r := newConfigReader(m)
	c.Writers = int(r.intKey("writers", int64(c.Writers), between(1, SyntheticMaxWriters)))
	c.Rate = r.intKey("rate", c.Rate, atLeast(0))
	c.PacketSize = int(r.intKey("packet_size", int64(c.PacketSize), between(SyntheticMinPacketSize, SyntheticMaxPacketSize)))
	c.MaxPackets = r.intKey("max_packets", c.MaxPackets, atLeast(0))
	c.Names = int(r.intKey("names", int64(c.Names), between(1, SyntheticMaxNames)))
	c.CounterEvery = int(r.intKey("counter_every", int64(c.CounterEvery), atLeast(0)))
	c.DeterministicTimestamps = r.boolKey("deterministic_timestamps", c.DeterministicTimestamps)
	c.trigger = readSyntheticTrigger(r) // synthetic_trigger.go
	if err := r.err(); err != nil {
		return SyntheticConfig{}, err
	}
	return c, nil
}

// SyntheticSeqName is the name of the DebugAnnotation that carries a
// TrackEvent packet's per-writer index.
const SyntheticSeqName = "seq"

// SyntheticGenerator produces the exact packet stream of one synthetic
// writer. The data source's writer goroutines use it, so tests can compute
// what a writer wrote. It is not safe for concurrent use.
//
// Stream of one writer (field numbers of trace-format.md §6):
//
//  1. Descriptor packet A: timestamp, sequence_flags = 1 (CLEARED),
//     first_packet_on_sequence = true (first A of the writer only),
//     track_descriptor {uuid = slice track, name "synthetic writer <w>"}.
//  2. Descriptor packet B: timestamp, sequence_flags = 2,
//     track_descriptor {uuid = counter track, name "synthetic counter <w>",
//     counter {}}.
//  3. TrackEvent packets i = 0, 1, 2, ...: timestamp, sequence_flags = 2
//     (NEEDS_INCREMENTAL_STATE), interned_data {event_names {iid, name}}
//     when the packet is the first to use that iid since the last CLEARED,
//     and track_event {type, track_uuid, name_iid (SLICE_BEGIN only),
//     counter_value = i (COUNTER only), debug_annotations[0] = {name
//     "seq", int_value = i}, debug_annotations[1] = {name "pad",
//     string_value = padding} when padding is needed}.
//     Packet i is a COUNTER on the counter track when CounterEvery > 0 and
//     i % CounterEvery == CounterEvery-1; otherwise SLICE_BEGIN and
//     SLICE_END alternate on the slice track. SLICE_BEGIN number k
//     (counting from 0) uses name iid k%Names + 1, whose name is
//     "synthetic_event_<iid>".
//
// After ClearIncrementalState the next two packets are A and B again
// (without first_packet_on_sequence) and names are re-interned as they are
// used. Descriptor packets carry the timestamp of the TrackEvent packet
// that follows them and no seq; Rate counts them, MaxPackets does not.
//
// The seq index: TracePacket.track_event (11) → TrackEvent.debug_annotations
// (4), first entry → DebugAnnotation{name (10) = "seq", int_value (4)}.
// SyntheticSeq reads it back.
type SyntheticGenerator struct {
	cfg                     SyntheticConfig
	threadUUID, counterUUID uint64
	threadName, counterName string
	pad                     []byte // shared, read-only
	ev                      []byte // scratch: TrackEvent fields before padding
	num                     [20]byte

	header   int // descriptor packets still due: 2 (A then B), 1 (B), 0
	first    bool
	seq      uint64 // index of the next TrackEvent packet
	begins   uint64 // SLICE_BEGINs so far
	interned int    // names interned since the last CLEARED
	open     bool   // a slice is open on the slice track
	clock    bootClock
}

// padRotation is how far the padding's start moves from packet to packet,
// so that consecutive packets are not byte-identical.
const padRotation = 1024

// NewSyntheticGenerator returns the generator of writer index writer
// (0-based) of an instance configured by cfg.
func NewSyntheticGenerator(cfg SyntheticConfig, writer int) *SyntheticGenerator {
	base := cfg.TrackUUIDBase
	if base == 0 {
		base = DefaultSyntheticTrackUUIDBase
	}
	w := strconv.Itoa(writer)
	return &SyntheticGenerator{
		cfg:         cfg,
		threadUUID:  base + 2*uint64(writer),
		counterUUID: base + 2*uint64(writer) + 1,
		threadName:  "synthetic writer " + w,
		counterName: "synthetic counter " + w,
		pad:         sharedPadding(cfg.PacketSize + padRotation),
		ev:          make([]byte, 0, 64),
		header:      2,
		first:       true,
	}
}

// TrackUUIDs returns the uuids of the writer's slice and counter tracks.
func (g *SyntheticGenerator) TrackUUIDs() (slice, counter uint64) {
	return g.threadUUID, g.counterUUID
}

// Seq is the index the next TrackEvent packet will carry (the number of
// TrackEvent packets generated so far).
func (g *SyntheticGenerator) Seq() uint64 { return g.seq }

// Done reports whether MaxPackets TrackEvent packets have been generated
// (never when MaxPackets is 0). Next keeps generating past it; the data
// source stops writing.
func (g *SyntheticGenerator) Done() bool {
	return g.cfg.MaxPackets > 0 && g.seq >= uint64(g.cfg.MaxPackets)
}

// ClearIncrementalState forgets the interning table: the next packets are
// the descriptor packets with sequence_flags CLEARED.
func (g *SyntheticGenerator) ClearIncrementalState() {
	g.header = 2
	g.interned = 0
}

// Next appends the writer's next packet to dst and returns the extended
// slice. In steady state (dst with room for a packet) it allocates nothing.
func (g *SyntheticGenerator) Next(dst []byte) []byte {
	var ts uint64
	if g.cfg.DeterministicTimestamps {
		base := g.cfg.TimestampBase
		if base == 0 {
			base = DefaultSyntheticTimestampBase
		}
		ts = base + g.seq*1000
	} else {
		ts = g.clock.now()
	}
	switch g.header {
	case 2:
		g.header = 1
		dst = wire.AppendVarint(dst, pktTimestamp, ts)
		dst = wire.AppendVarint(dst, pktSequenceFlags, seqIncrementalStateCleared)
		if g.first {
			g.first = false
			dst = wire.AppendVarint(dst, pktFirstPacketOnSequence, 1)
		}
		n := 1 + protowire.SizeVarint(g.threadUUID) + lenFieldSize(len(g.threadName))
		dst = wire.AppendLen(dst, pktTrackDescriptor, n)
		dst = wire.AppendVarint(dst, tdUUID, g.threadUUID)
		return wire.AppendString(dst, tdName, g.threadName)
	case 1:
		g.header = 0
		dst = wire.AppendVarint(dst, pktTimestamp, ts)
		dst = wire.AppendVarint(dst, pktSequenceFlags, seqNeedsIncrementalState)
		n := 1 + protowire.SizeVarint(g.counterUUID) + lenFieldSize(len(g.counterName)) + lenFieldSize(0)
		dst = wire.AppendLen(dst, pktTrackDescriptor, n)
		dst = wire.AppendVarint(dst, tdUUID, g.counterUUID)
		dst = wire.AppendString(dst, tdName, g.counterName)
		return append(dst, tagTDCounter, 0)
	}
	return g.event(dst, ts)
}

const syntheticNamePrefix = "synthetic_event_"

// SyntheticEventName is the name interned under iid (1-based).
func SyntheticEventName(iid uint64) string {
	return syntheticNamePrefix + strconv.FormatUint(iid, 10)
}

func (g *SyntheticGenerator) event(dst []byte, ts uint64) []byte {
	start := len(dst)
	seq := g.seq
	g.seq++
	dst = wire.AppendVarint(dst, pktTimestamp, ts)
	dst = wire.AppendVarint(dst, pktSequenceFlags, seqNeedsIncrementalState)

	ev := g.ev[:0]
	switch {
	case g.cfg.CounterEvery > 0 && seq%uint64(g.cfg.CounterEvery) == uint64(g.cfg.CounterEvery-1):
		ev = wire.AppendVarint(ev, teType, teTypeCounter)
		ev = wire.AppendVarint(ev, teTrackUUID, g.counterUUID)
		ev = wire.AppendVarint(ev, teCounterValue, seq)
	case !g.open:
		g.open = true
		iid := g.begins%uint64(g.cfg.Names) + 1
		g.begins++
		if g.interned < g.cfg.Names {
			g.interned++
			dst = g.appendInterned(dst, iid)
		}
		ev = wire.AppendVarint(ev, teType, teTypeSliceBegin)
		ev = wire.AppendVarint(ev, teTrackUUID, g.threadUUID)
		ev = wire.AppendVarint(ev, teNameIID, iid)
	default:
		g.open = false
		ev = wire.AppendVarint(ev, teType, teTypeSliceEnd)
		ev = wire.AppendVarint(ev, teTrackUUID, g.threadUUID)
	}
	// debug_annotations {name: "seq", int_value: seq}
	ev = append(ev, tagTEDebugAnnotation, byte(6+protowire.SizeVarint(seq)),
		tagDAName, 3, 's', 'e', 'q', tagDAIntValue)
	ev = protowire.AppendVarint(ev, seq)
	g.ev = ev

	p := padLen(g.cfg.PacketSize, len(dst)-start, len(ev))
	if p < 0 {
		dst = wire.AppendLen(dst, pktTrackEvent, len(ev))
		return append(dst, ev...)
	}
	d := padAnnotationSize(p)
	dst = wire.AppendLen(dst, pktTrackEvent, len(ev)+lenFieldSize(d))
	dst = append(dst, ev...)
	dst = append(dst, tagTEDebugAnnotation)
	dst = protowire.AppendVarint(dst, uint64(d))
	dst = append(dst, tagDAName, 3, 'p', 'a', 'd', tagDAStringValue)
	dst = protowire.AppendVarint(dst, uint64(p))
	off := int(seq*61) % padRotation
	return append(dst, g.pad[off:off+p]...)
}

// appendInterned appends interned_data {event_names {iid, name}}.
func (g *SyntheticGenerator) appendInterned(dst []byte, iid uint64) []byte {
	digits := strconv.AppendUint(g.num[:0], iid, 10)
	nameLen := len(syntheticNamePrefix) + len(digits)
	en := 1 + protowire.SizeVarint(iid) + lenFieldSize(nameLen)
	id := lenFieldSize(en)
	dst = wire.AppendLen(dst, pktInternedData, id)
	dst = wire.AppendLen(dst, idEventNames, en)
	dst = wire.AppendVarint(dst, enIID, iid)
	dst = wire.AppendLen(dst, enName, nameLen)
	dst = append(dst, syntheticNamePrefix...)
	return append(dst, digits...)
}

// padAnnotationSize is the size of DebugAnnotation{name "pad",
// string_value of p bytes}.
func padAnnotationSize(p int) int { return 5 + lenFieldSize(p) }

// paddedSize is the size of a TrackEvent packet with head bytes before the
// track_event field, ev bytes of TrackEvent fields and a pad annotation of
// p bytes.
func paddedSize(head, ev, p int) int {
	e := ev + lenFieldSize(padAnnotationSize(p))
	return head + lenFieldSize(e)
}

// padLen returns the largest padding length p such that the packet is at
// most target bytes, or -1 if even an empty pad annotation does not fit.
// The result is at most 3 bytes short of target (varint size steps).
func padLen(target, head, ev int) int {
	// Upper bound: the pad annotation costs at least 9 bytes besides p.
	p := target - (head + lenFieldSize(ev)) - 9
	for p >= 0 && paddedSize(head, ev, p) > target {
		p--
	}
	return p
}

var (
	padMu  sync.Mutex
	padBuf []byte // read-only once published; only ever replaced by a longer copy
)

// sharedPadding returns n bytes of printable pseudo-random ASCII. The
// content depends only on the offset, so every caller sees the same bytes;
// the slice is shared and must not be written.
func sharedPadding(n int) []byte {
	padMu.Lock()
	defer padMu.Unlock()
	if len(padBuf) < n {
		const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
		b := make([]byte, max(n, 4096))
		x := uint64(0x9e3779b97f4a7c15)
		for i := range b {
			// xorshift64*
			x ^= x >> 12
			x ^= x << 25
			x ^= x >> 27
			b[i] = alphabet[(x*0x2545f4914f6cdd1d)>>58]
		}
		padBuf = b
	}
	return padBuf[:n:n]
}

// SyntheticSeq returns the seq index of a synthetic TrackEvent packet (see
// SyntheticGenerator), and false for any other packet (descriptor packets
// included).
func SyntheticSeq(packet []byte) (uint64, bool) {
	te, ok := findBytesField(packet, pktTrackEvent)
	if !ok {
		return 0, false
	}
	it := wire.Fields(te)
	for it.Next() {
		f := it.Field()
		if f.Num == teDebugAnnotations && f.Type == protowire.BytesType {
			if name, ok := findBytesField(f.Bytes, daName); ok && string(name) == SyntheticSeqName {
				if v, ok := findVarintField(f.Bytes, daIntValue); ok {
					return v, true
				}
			}
		}
	}
	return 0, false
}

// findBytesField returns the last length-delimited field num of msg.
func findBytesField(msg []byte, num protowire.Number) ([]byte, bool) {
	f, ok := wire.Last(msg, num, protowire.BytesType)
	return f.Bytes, ok
}

// findVarintField returns the last varint field num of msg.
func findVarintField(msg []byte, num protowire.Number) (uint64, bool) {
	f, ok := wire.Last(msg, num, protowire.VarintType)
	return f.Varint, ok
}
