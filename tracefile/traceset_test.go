package tracefile

import (
	"slices"
	"testing"
)

// Rotated names keep the name's extension whole, so that a rotated file
// still opens by its name (t.pftrace.zst.1 lost .zst), and SplitRotatedFileName
// inverts RotatedFileName.
func TestFileNameKeepsExtension(t *testing.T) {
	for _, c := range []struct {
		path string
		i    int
		want string
	}{
		{"out/t.pftrace.zst", 1, "out/t.1.pftrace.zst"},
		{"out/t.pftrace.gz", 2, "out/t.2.pftrace.gz"},
		{"out/t.pftrace", 10, "out/t.10.pftrace"},
		{"out/trace-20261127-082501.123.pftrace", 1, "out/trace-20261127-082501.123.1.pftrace"},
		{"out.d/t", 3, "out.d/t.3"},
		{"out/t.gz", 1, "out/t.1.gz"},
		{"out/.hidden", 1, "out/.hidden.1"},
		{"out/t.pftrace", 0, "out/t.pftrace"},
	} {
		got := RotatedFileName(c.path, c.i)
		if got != c.want {
			t.Errorf("RotatedFileName(%q, %d) = %q, want %q", c.path, c.i, got, c.want)
		}
		if p, i := SplitRotatedFileName(got); p != c.path || i != c.i {
			t.Errorf("SplitRotatedFileName(%q) = %q, %d, want %q, %d", got, p, i, c.path, c.i)
		}
	}
}

// A set is read in the order the sink wrote it, not a shell glob's.
func TestRotationOrder(t *testing.T) {
	if got := RotationOrder([]string{"t.10.pftrace", "t.pftrace", "t.2.pftrace", "t.1.pftrace"}); !slices.Equal(got, []string{"t.pftrace", "t.1.pftrace", "t.2.pftrace", "t.10.pftrace"}) {
		t.Errorf("rotation order %v", got)
	}
}

// The default output name has {timestamp}'s milliseconds in it
// (trace-20261127-105711.454.pftrace): ".454" is not a rotation index
// when the set holds that file's own rotations, and the set still starts
// with it (a glob sorts t-….454.1.pftrace before t-….454.pftrace, and the
// set's last TraceStats came from its first file).
func TestRotationOrderTimestampMilliseconds(t *testing.T) {
	glob := []string{
		"out/trace-20261127-105711.454.1.pftrace",
		"out/trace-20261127-105711.454.10.pftrace",
		"out/trace-20261127-105711.454.2.pftrace",
		"out/trace-20261127-105711.454.pftrace",
	}
	want := []string{
		"out/trace-20261127-105711.454.pftrace",
		"out/trace-20261127-105711.454.1.pftrace",
		"out/trace-20261127-105711.454.2.pftrace",
		"out/trace-20261127-105711.454.10.pftrace",
	}
	if got := RotationOrder(glob); !slices.Equal(got, want) {
		t.Errorf("rotation order\n got %v\nwant %v", got, want)
	}
	// Two sessions' sets given together stay apart, each in its order.
	two := append([]string{"out/trace-20261127-105711.5.pftrace", "out/trace-20261127-105711.5.1.pftrace"}, glob...)
	want2 := append(slices.Clone(want), "out/trace-20261127-105711.5.pftrace", "out/trace-20261127-105711.5.1.pftrace")
	if got := RotationOrder(two); !slices.Equal(got, want2) {
		t.Errorf("two sets\n got %v\nwant %v", got, want2)
	}
}
