package pipeline

import (
	"strings"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/tpimport"
)

// checkImports asserts tracepipe check finds a trace clean: no packet
// skipped for missing incremental state, no problem but SMB loss.
func checkImports(t *testing.T, what, path string) {
	t.Helper()
	rep, err := tpimport.CheckFile(path, tpimport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var skipped int64
	for _, q := range rep.Sequences {
		skipped += q.NeedsSkipped
	}
	if skipped != 0 || len(rep.Codes()) != 0 && !onlySMBLoss(rep) {
		var sb strings.Builder
		_ = rep.WriteText(&sb)
		t.Fatalf("%s (%s): tracepipe check: %d packets skipped\n%s", what, path, skipped, sb.String())
	}
}

// transfer_on_clone hands the buffer to the snapshot; the live session's
// sequences go on in an empty buffer, and their next packets still
// import: the live trace gets a restore with each sequence's state as of
// the transfer (the moved packets folded), even though no sequence clears
// its incremental state again (clear_period 0).
func TestTransferOnCloneKeepsLiveTraceImportable(t *testing.T) {
	s, _, stop := snapshotSession(t, "buffers[0].size_kb=16384", "buffers[0].transfer_on_clone=true",
		"incremental_state.clear_period=0s", "data_sources[0].config.writers=2")
	waitFor(t, "half a second of recording", 20*time.Second, func() bool { return s.Status().Elapsed >= 500*time.Millisecond })
	r := <-s.Snapshot(SnapshotRequest{Trigger: "moved"})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	in := s.Status().BytesIn
	waitFor(t, "data after the transfer", 20*time.Second, func() bool { return s.Status().BytesIn > in+256<<10 })
	res := stop()
	checkImports(t, "snapshot", r.Files[0])
	checkImports(t, "live trace", res.Files[0])
}
