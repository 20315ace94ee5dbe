//go:build !amd64

package buffer

// prefetch is a no-op where no prefetch instruction is wired up; warm's
// loads still overlap the misses of the record being walked.
func prefetch(b []byte) {}
