//go:build smbsched

package smb

// schedHook, when set (by the interleaving test, sched_test.go), is called
// at every yieldAt point, where it may run the other side of the SMB
// before returning. Built only with the smbsched tag.
var schedHook func(site)

func yieldAt(s site) {
	if h := schedHook; h != nil {
		h(s)
	}
}
