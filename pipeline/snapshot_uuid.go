package pipeline

// SnapshotUUID is the trace UUID of snapshot n of the session (the n of
// its SnapshotResult): a Perfetto consumer's CloneSession answers with it.
func (s *Service) SnapshotUUID(n int) [16]byte {
	var u [16]byte
	s.snapUUID(&u, n)
	return u
}
