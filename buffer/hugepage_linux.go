package buffer

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the size of a transparent huge page on the platforms this
// matters for (x86-64 and arm64 with 4 KiB base pages).
const hugePage = 2 << 20

// adviseHugePages asks Linux to back the 2 MiB-aligned part of mem with
// transparent huge pages (where THP is in "madvise" mode, the common
// default, it otherwise never does). A buffer is tens of MiB walked from
// end to end: with 4 KiB pages every 4 KiB costs a page fault on first use
// (about 12 µs on a VM) and a TLB miss on every pass. It is advice only: a
// kernel that refuses it changes nothing, so the error is ignored.
func adviseHugePages(mem []byte) {
	if len(mem) < 2*hugePage {
		return
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	from := (start + hugePage - 1) &^ (hugePage - 1)
	to := (start + uintptr(len(mem))) &^ (hugePage - 1)
	if to <= from {
		return
	}
	_ = unix.Madvise(mem[from-start:to-start], unix.MADV_HUGEPAGE)
}
