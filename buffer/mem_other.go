//go:build !unix

package buffer

// mapMem falls back to the Go heap where there is no mmap.
func mapMem(n int) ([]byte, error) { return make([]byte, n), nil }

func unmapMem([]byte) {}
