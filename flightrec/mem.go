package flightrec

import "golang.org/x/sys/unix"

// CloneMem allocates n bytes for a clone, pre-faulted (MAP_POPULATE),
// outside the Go heap so that releasing it gives the pages back to the
// OS at once: memory is 2× the buffers only while a snapshot runs. Call
// it on the snapshot's goroutine, never on the session core's, because
// faulting in a 256 MiB buffer takes far longer than the pause budget.
// The returned func unmaps the memory; call it once, after the last use.
func CloneMem(n int) ([]byte, func(), error) {
	if n == 0 {
		return nil, func() {}, nil
	}
	m, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE|unix.MAP_POPULATE)
	if err != nil {
		return nil, nil, err
	}
	return m, func() { _ = unix.Munmap(m) }, nil
}
