package tracefile

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// LocalSystemInfo describes the machine this process runs on, as a
// service writes it into its traces: utsname, service version, page size
// and CPU count.
func LocalSystemInfo() *SystemInfo {
	si := &SystemInfo{
		ServiceVersion: "tracepipe",
		PageSize:       uint64(unix.Getpagesize()),
		NumCPUs:        uint64(runtime.NumCPU()),
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		si.HasUname = true
		si.Sysname = unix.ByteSliceToString(u.Sysname[:])
		si.Version = unix.ByteSliceToString(u.Version[:])
		si.Release = unix.ByteSliceToString(u.Release[:])
		si.Machine = unix.ByteSliceToString(u.Machine[:])
	}
	return si
}
