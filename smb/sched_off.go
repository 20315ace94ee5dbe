//go:build !smbsched

package smb

// yieldAt marks a point where the other side of the SMB may act: a
// schedule-exploring test build (tag smbsched, sched_on.go) switches
// goroutines there. In every other build it is empty and inlines away.
func yieldAt(site) {}
