package testsupport

import (
	"testing"

	"golang.org/x/sys/unix"
)

// SealedMemfd makes a memfd as Perfetto's SDK makes its own SMB: size
// bytes, sealed against shrinking, growing and further seals (0x7). The
// caller owns the descriptor.
func SealedMemfd(t testing.TB, size int) int {
	t.Helper()
	fd, err := unix.MemfdCreate("perfetto_shmem", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	return fd
}
