package perfettosvc

import (
	"testing"
)

// Serve gives the runtime the consumer sessions' soft memory
// limit at once and hands the consumers the setter that follows their
// sessions; a user's GOMEMLIMIT wins: nothing is set, now or later.
func TestServePerfettoHeapLimit(t *testing.T) {
	var set []int64
	record := func(n int64) int64 { set = append(set, n); return 0 }
	pc := &PerfettoConsumers{}
	limitHeap(pc, "", record)
	if len(set) != 1 || set[0] != pc.HeapLimit() || set[0] <= 0 {
		t.Fatalf("limits set %v, want the consumers' base limit %d once", set, pc.HeapLimit())
	}
	if pc.SetHeapLimit == nil {
		t.Fatal("the consumers cannot move the limit as sessions come and go")
	}
	pc.SetHeapLimit(123 << 20)
	if set[len(set)-1] != 123<<20 {
		t.Fatalf("a session's limit %v did not reach the runtime", set)
	}

	set = nil
	user := &PerfettoConsumers{}
	limitHeap(user, "100MiB", record)
	if len(set) != 0 || user.SetHeapLimit != nil {
		t.Fatalf("with GOMEMLIMIT set: limits %v set, setter %v", set, user.SetHeapLimit != nil)
	}
}
