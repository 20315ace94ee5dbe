package rawio

import (
	"bytes"
	"errors"
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func memfd(t *testing.T) int {
	t.Helper()
	fd, err := unix.MemfdCreate("rawio-test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatalf("memfd_create: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// sysFD is f's descriptor, taken without os.File.Fd (which would make it
// blocking).
func sysFD(t *testing.T, f *os.File) int {
	t.Helper()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	if err := rc.Control(func(d uintptr) { fd = int(d) }); err != nil {
		t.Fatal(err)
	}
	return fd
}

// Which descriptors a write never sleeps on: a regular file on tmpfs, a
// non-blocking pipe; not a blocking pipe, a character device, or a
// descriptor that is not open.
func TestNeverSleeps(t *testing.T) {
	r, w, err := os.Pipe() // the os package makes pipes non-blocking
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	for _, c := range []struct {
		name string
		fd   int
		want bool
	}{
		{"memfd (tmpfs)", memfd(t), true},
		{"non-blocking pipe", sysFD(t, w), true},
		{"blocking pipe", p[1], false},
		{"/dev/null", sysFD(t, null), false},
		{"closed descriptor", -1, false},
	} {
		if got := NeverSleeps(c.fd); got != c.want {
			t.Errorf("%s: NeverSleeps = %v, want %v", c.name, got, c.want)
		}
		if got, want := MemFile(c.fd), c.name == "memfd (tmpfs)"; got != want {
			t.Errorf("%s: MemFile = %v, want %v", c.name, got, want)
		}
	}
}

// Write writes everything, allocation-free; a refused write returns the
// kernel's error and what was written before it.
func TestWrite(t *testing.T) {
	fd := memfd(t)
	p := bytes.Repeat([]byte("0123456789"), 100000) // 1 MB: several pages
	if n := testing.AllocsPerRun(3, func() {
		if _, err := unix.Seek(fd, 0, 0); err != nil {
			t.Fatal(err)
		}
		if n, err := Write(fd, p); n != len(p) || err != nil {
			t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(p))
		}
	}); n != 0 {
		t.Errorf("%.1f allocations per Write", n)
	}
	got := make([]byte, len(p))
	if n, err := unix.Pread(fd, got, 0); n != len(p) || !bytes.Equal(got, p) {
		t.Fatalf("file holds %d bytes (%v), want what was written", n, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_GROW); err != nil {
		t.Fatal(err)
	}
	if n, err := Write(fd, p); n != 0 || !errors.Is(err, syscall.EPERM) {
		t.Fatalf("Write past a sealed end = %d, %v; want 0, EPERM", n, err)
	}
}
