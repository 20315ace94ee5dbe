package tracefile

import "github.com/tracepipe/tracepipe/internal/wire"

// SyncedClocks is one RemoteClockSync.SyncedClocks (field 1 of
// remote_clock_sync, 107): a snapshot of a remote machine's clocks
// (client_clocks, 2) and the host's clocks taken when the client's
// snapshot arrived (host_clocks, 3), each a ClockSnapshot holding only
// clocks (trace-processor-import.md §9).
//
// trace_processor reads adjacent entries less than 30 s apart in client
// BOOTTIME as the two halves of one round (client, host, client, host)
// and estimates each clock's offset client − host from the four readings.
type SyncedClocks struct {
	Client, Host []Clock
}

// AppendRemoteClockSync appends a remote_clock_sync (107) field:
// RemoteClockSync{synced_clocks 1 (repeated)}.
func AppendRemoteClockSync(dst []byte, synced []SyncedClocks) []byte {
	return wire.AppendNested(dst, FieldRemoteClockSync, func(b []byte) []byte {
		for _, s := range synced {
			b = wire.AppendNested(b, 1, func(b []byte) []byte {
				b = wire.AppendNested(b, 2, func(b []byte) []byte { return appendClocks(b, s.Client) })
				return wire.AppendNested(b, 3, func(b []byte) []byte { return appendClocks(b, s.Host) })
			})
		}
		return b
	})
}

// appendClocks appends the clocks (1) of a ClockSnapshot.
func appendClocks(b []byte, clocks []Clock) []byte {
	for _, c := range clocks {
		b = wire.AppendNested(b, 1, func(b []byte) []byte {
			b = wire.AppendVarint(b, 1, uint64(c.ID))
			return wire.AppendVarint(b, 2, c.Timestamp)
		})
	}
	return b
}
