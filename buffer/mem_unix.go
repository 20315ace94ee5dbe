//go:build unix

package buffer

import "syscall"

// mapMem maps n zeroed bytes, private and anonymous. The pages are faulted
// in as they are first written, so an idle ring costs address space only.
func mapMem(n int) ([]byte, error) {
	return syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
}

func unmapMem(m []byte) { _ = syscall.Munmap(m) }
