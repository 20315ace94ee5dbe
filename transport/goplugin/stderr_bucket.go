package goplugin

import "time"

// StderrBurstSeconds is the burst of the stderr rate limits, in seconds of
// their rate (data_sources[i].limits.stderr_*_per_second).
const StderrBurstSeconds = 10

// stderrBucket is a token bucket of lines and bytes: a line is logged
// when both buckets hold enough, else it is suppressed and counted. Not
// safe for concurrent use (lineLogger's mutex guards it).
type stderrBucket struct {
	lineRate, byteRate float64 // tokens per second
	lines, bytes       float64 // tokens now
	last               time.Time
	now                func() time.Time
}

func newStderrBucket(lineRate, byteRate float64, now func() time.Time) *stderrBucket {
	return &stderrBucket{
		lineRate: lineRate, byteRate: byteRate,
		lines: lineRate * StderrBurstSeconds, bytes: byteRate * StderrBurstSeconds,
		last: now(), now: now,
	}
}

// allow takes one line of n bytes from the buckets if both hold enough.
func (b *stderrBucket) allow(n int) bool {
	t := b.now()
	if dt := t.Sub(b.last).Seconds(); dt > 0 {
		b.lines = min(b.lines+dt*b.lineRate, b.lineRate*StderrBurstSeconds)
		b.bytes = min(b.bytes+dt*b.byteRate, b.byteRate*StderrBurstSeconds)
		b.last = t
	}
	cost := float64(max(n, 1))
	if b.lines < 1 || b.bytes < cost {
		return false
	}
	b.lines--
	b.bytes -= cost
	return true
}
