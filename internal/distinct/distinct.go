// Package distinct estimates how many distinct 64-bit keys a stream holds,
// in fixed memory (a HyperLogLog sketch of 16,384 one-byte registers:
// about 0.8% standard error; small sets are estimated by linear counting,
// within a few keys). Readers use it to say how many sequences they summarised
// beyond the ones they track, without remembering them. It owns no I/O;
// Add never allocates.
package distinct

import (
	"math"
	"math/bits"
)

const (
	precision = 14
	registers = 1 << precision
)

// Counter is a fixed-size distinct-count sketch. The zero value is ready.
type Counter struct {
	reg [registers]uint8
}

// Add records key.
func (c *Counter) Add(key uint64) {
	h := mix(key)
	i := h >> (64 - precision)
	rank := uint8(bits.LeadingZeros64(h<<precision|1<<(precision-1)) + 1)
	if rank > c.reg[i] {
		c.reg[i] = rank
	}
}

// Estimate returns the estimated number of distinct keys added.
func (c *Counter) Estimate() uint64 {
	sum := 0.0
	zeros := 0
	for _, r := range c.reg {
		sum += math.Ldexp(1, -int(r))
		if r == 0 {
			zeros++
		}
	}
	m := float64(registers)
	e := 0.7213 / (1 + 1.079/m) * m * m / sum
	if e <= 2.5*m && zeros > 0 {
		e = m * math.Log(m/float64(zeros)) // linear counting for small sets
	}
	return uint64(math.Round(e))
}

// mix is splitmix64's finaliser: keys that differ in one bit hash apart.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
