package sinks

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// Snapshot says a sink is opened for one clone snapshot of a running
// session (Env.Snapshot): a trace of its own, whose Env.SessionUUID is the
// snapshot's uuid, written beside the live session's trace. File sinks
// name it by DefaultSnapshotPattern; network sinks tell their receiver,
// which names it the same way (relay hello, NATS headers).
type Snapshot struct {
	Of      [16]byte // the live session's uuid
	N       uint32   // the snapshot's number in that session, from 1; 0: not a snapshot
	Trigger string   // the trigger that took it ("manual", "sigusr1", a trigger_config name)
}

// IsZero reports whether s describes no snapshot (an ordinary session).
func (s Snapshot) IsZero() bool { return s.N == 0 }

// MaxSnapshotTrigger bounds a snapshot's trigger name as sinks send it.
const MaxSnapshotTrigger = 255

// DefaultSnapshotPattern names a snapshot's file: {stem} is the live
// trace's file name without its extension(s), {n} the snapshot's number
// in the session, {trigger} the trigger's name (characters other than
// letters, digits, '.', '_' and '-' become '_').
const DefaultSnapshotPattern = "{stem}.snap-{n}-{trigger}.pftrace"

// SnapshotName expands pattern for snapshot n of trigger, beside path
// (the live trace's file).
func SnapshotName(pattern, path string, n uint32, trigger string) string {
	dir, base := filepath.Split(path)
	stem := base
	for _, ext := range []string{".gz", ".zst"} {
		stem = strings.TrimSuffix(stem, ext)
	}
	stem = strings.TrimSuffix(stem, filepath.Ext(stem))
	r := strings.NewReplacer("{stem}", stem, "{n}", fmt.Sprint(n), "{trigger}", unsafeFileChars.ReplaceAllString(trigger, "_"))
	return filepath.Join(dir, r.Replace(pattern))
}

// unsafeFileChars are replaced in a trigger name used in a file name.
var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)
