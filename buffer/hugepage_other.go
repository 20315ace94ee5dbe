//go:build !linux

package buffer

// adviseHugePages does nothing where there is no madvise(MADV_HUGEPAGE).
func adviseHugePages(mem []byte) {}
