package buffer

// prefetch asks the CPU to bring every cache line of b into cache without
// waiting for it (prefetch_amd64.s).
//
//go:noescape
func prefetch(b []byte)
