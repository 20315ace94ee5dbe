package tracefile

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// A trace set is the files one rotating file sink wrote: t.pftrace,
// t.1.pftrace, t.2.pftrace, ... (RotatedFileName). Each file is
// self-contained (service packets, restore packets, a TraceStats at its
// end); `stats` and `inspect` given several files report the set as one
// trace, in rotation order (RotationOrder, StatsScan.Add, MergeSummary),
// plus each file's own counters. The names are part of the format: the
// file sink writes them and the readers order a set by them.

// RotatedFileName returns the name of the file with rotation index i: the
// configured path for 0; after that the index goes before the name's
// extension, which stays whole so that the file still opens by its name
// (t.pftrace.zst → t.1.pftrace.zst; t → t.1). See SplitRotatedFileName.
func RotatedFileName(path string, i int) string {
	if i == 0 {
		return path
	}
	stem, ext := splitExt(path)
	return stem + "." + strconv.Itoa(i) + ext
}

// splitExt splits a path into stem and extension: the compression
// extension (.gz, .zst) with the one before it (.pftrace.zst), or the last
// extension alone. Dots inside the stem ({timestamp}'s milliseconds) stay
// in it.
// An all-digit extension is a rotation index, never part of the extension.
func splitExt(path string) (stem, ext string) {
	dir, base := filepath.Split(path)
	ext = filepath.Ext(base)
	if isDigits(ext) {
		ext = ""
	}
	if ext == ".gz" || ext == ".zst" {
		if inner := filepath.Ext(strings.TrimSuffix(base, ext)); !isDigits(inner) {
			ext = inner + ext
		}
	}
	if ext == base { // a dotfile: all name, no extension
		ext = ""
	}
	return dir + strings.TrimSuffix(base, ext), ext
}

// isDigits reports whether ext is "." followed by decimal digits only.
func isDigits(ext string) bool {
	if len(ext) < 2 {
		return false
	}
	for _, r := range ext[1:] {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// SplitRotatedFileName is RotatedFileName's inverse: the configured path
// and rotation index of a file a sink wrote (t.2.pftrace.zst →
// t.pftrace.zst, 2; a name without an index → itself, 0).
func SplitRotatedFileName(name string) (path string, i int) {
	stem, ext := splitExt(name)
	if j := strings.LastIndexByte(stem, '.'); j >= 0 && !strings.ContainsRune(stem[j:], filepath.Separator) && j > strings.LastIndexByte(stem, filepath.Separator)+1 {
		if n, err := strconv.Atoi(stem[j+1:]); err == nil && n > 0 && strconv.Itoa(n) == stem[j+1:] {
			return stem[:j] + ext, n
		}
	}
	return name, 0
}

// RotationOrder sorts the files of a set as the sink wrote them: by name
// without the rotation index, then by the index (t.pftrace before
// t.2.pftrace before t.10.pftrace; a shell glob sorts .10 first). paths
// is not modified.
//
// A name's last number is ambiguous: {timestamp}'s milliseconds
// (trace-20261127-105711.454.pftrace) look like a rotation index. A file
// that another file of paths names as its configured path is that set's
// first file (index 0), whatever its name ends with.
func RotationOrder(paths []string) []string {
	type key struct {
		path string
		i    int
	}
	bases := map[string]bool{}
	for _, p := range paths {
		if b, i := SplitRotatedFileName(p); i > 0 {
			bases[b] = true
		}
	}
	keys := make(map[string]key, len(paths))
	for _, p := range paths {
		if bases[p] {
			keys[p] = key{p, 0}
		} else {
			b, i := SplitRotatedFileName(p)
			keys[p] = key{b, i}
		}
	}
	out := slices.Clone(paths)
	slices.SortStableFunc(out, func(a, b string) int {
		ka, kb := keys[a], keys[b]
		if c := strings.Compare(ka.path, kb.path); c != 0 {
			return c
		}
		return ka.i - kb.i
	})
	return out
}

// MergeSummary adds the summary of the next file of a set to acc and
// returns the sum (s itself when acc is nil): the set as one trace.
func MergeSummary(acc, s *Summary) *Summary {
	if acc == nil {
		return s
	}
	acc.Packets += s.Packets
	acc.Bytes += s.Bytes
	acc.StreamBytes += s.StreamBytes
	if s.HasTimestamps {
		widen(&acc.MinTimestamp, &acc.MaxTimestamp, &acc.HasTimestamps, s.MinTimestamp)
		widen(&acc.MinTimestamp, &acc.MaxTimestamp, &acc.HasTimestamps, s.MaxTimestamp)
	}
	acc.PreviousPacketDropped += s.PreviousPacketDropped
	for _, q := range s.Sequences {
		i := slices.IndexFunc(acc.Sequences, func(a SequenceSummary) bool { return a.ID == q.ID })
		if i < 0 {
			acc.Sequences = append(acc.Sequences, q)
			continue
		}
		a := &acc.Sequences[i]
		if q.HasTimestamps {
			widen(&a.MinTimestamp, &a.MaxTimestamp, &a.HasTimestamps, q.MinTimestamp)
			widen(&a.MinTimestamp, &a.MaxTimestamp, &a.HasTimestamps, q.MaxTimestamp)
		}
		a.Packets += q.Packets
		a.Bytes += q.Bytes
		a.PreviousPacketDropped += q.PreviousPacketDropped
		a.LossBits |= q.LossBits
	}
	slices.SortFunc(acc.Sequences, func(a, b SequenceSummary) int { return int(a.ID) - int(b.ID) })
	for k, n := range s.Kinds {
		acc.Kinds[k] += n
	}
	acc.BadPackets += s.BadPackets
	acc.SkippedFields += s.SkippedFields
	acc.SummarisedSequences += s.SummarisedSequences // per file: an upper bound for the set
	acc.ElidedPackets += s.ElidedPackets
	acc.ElidedBytes += s.ElidedBytes
	acc.TraceStatsPackets += s.TraceStatsPackets
	if s.LastTraceStats != nil {
		acc.LastTraceStats = s.LastTraceStats
	}
	acc.Truncated = acc.Truncated || s.Truncated
	if acc.TruncatedErr == nil {
		acc.TruncatedErr = s.TruncatedErr
	}
	return acc
}
