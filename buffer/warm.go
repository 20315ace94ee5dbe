package buffer

// Reads and overwrites walk a record's fragments one varint header at a
// time, and each header's position depends on the one before. The record
// was written long ago (a ring of tens of MiB is far larger than the
// cache), so that walk is a chain of cache misses taken one after another:
// most of the time of a read or of an observed overwrite went there. warm
// loads one byte of every cache line of a range first; those loads do not
// depend on each other, so the CPU keeps many misses in flight at once and
// the header walk that follows finds the lines in cache.

// cacheLine is the stride of warm's loads and of prefetch: the line size of
// x86-64 and of most arm64 cores (where lines are bigger, some loads only
// hit a line already asked for).
const cacheLine = 64

// warm touches every cache line of b.mem[from:to].
func (b *TraceBuffer) warm(from, to int) {
	if to > len(b.mem) {
		to = len(b.mem)
	}
	if from >= to {
		return
	}
	b.warmSink = touchLines(b.mem[from:to]) // kept so the loads are not optimised away
}

// touchLines loads one byte of every cache line of m (m not empty) and
// returns their xor.
func touchLines(m []byte) byte {
	var x byte
	for i := 0; i < len(m); i += cacheLine {
		x ^= m[i]
	}
	return x ^ m[len(m)-1]
}

// prefetchAhead is how far past the range being walked prefetchRange asks
// for lines: the records the next calls will walk arrive while this one
// works.
const prefetchAhead = 8 << 10

// prefetchRange prefetches b.mem[from:to+prefetchAhead], skipping what the
// previous call already asked for when the ranges continue each other (the
// common case: overwrites and reads both move forward through the ring).
func (b *TraceBuffer) prefetchRange(from, to int) {
	to += prefetchAhead
	if to > b.usedSize {
		to = b.usedSize
	}
	if from >= b.pfFrom && from <= b.pfTo {
		if to <= b.pfTo {
			return
		}
		from = b.pfTo
	} else {
		b.pfFrom = from
	}
	if from < to {
		prefetch(b.mem[from:to])
		b.pfTo = to
	}
}
