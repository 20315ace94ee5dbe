//go:build smbsched

package smb

import (
	"math/rand/v2"
	"os"
	"time"
)

// schedHook, when set (by the interleaving test, sched_test.go), is called
// at every yieldAt point, where it may run the other side of the SMB
// before returning. Built only with the smbsched tag.
var schedHook func(site)

func yieldAt(s site) {
	if h := schedHook; h != nil {
		h(s)
	}
}

// JitterEnv, set in the environment of a process built with the smbsched
// tag, makes every scrape pause now and then between its loads of a
// chunk's header, as a service starved of CPU is paused by the kernel:
// tools/killloop uses it to make the whole pipeline meet the schedules
// that a busy machine produces only rarely.
const JitterEnv = "TRACEPIPE_SMB_JITTER"

func init() {
	if os.Getenv(JitterEnv) != "" {
		schedHook = jitter
	}
}

func jitter(s site) {
	switch s {
	case siteScrapeChunkID, siteScrapeHeader:
		if rand.IntN(4) == 0 {
			time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
		}
	}
}
