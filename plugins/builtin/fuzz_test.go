package builtin

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
)

// Fuzz targets for the /proc parsers. Each checks that a parser never
// panics and that what it accepted survives a render/parse round trip
// unchanged. Seed corpora live in testdata/fuzz/<FuzzName>/.

func FuzzParseProcStat(f *testing.F) {
	f.Add([]byte(statLine(1, "systemd", 'S', 0, 4194560)))
	f.Add([]byte(statLine(42, "a) (b c", 'R', 1, 0x200000)))
	f.Add([]byte("9 (x) S 1 2 3 4 5 6"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseProcStat(b)
		if err != nil {
			return
		}
		if !bytes.Contains(b, st.Comm) {
			t.Fatalf("comm %q not in the input", st.Comm)
		}
		line := fmt.Sprintf("%d (%s) %c %d 0 0 0 0 %d 0 0\n", st.PID, st.Comm, st.State, st.PPID, st.Flags)
		again, err := parseProcStat([]byte(line))
		if err != nil {
			t.Fatalf("re-rendered %q: %v", line, err)
		}
		if !reflect.DeepEqual(again, st) {
			t.Fatalf("round trip of %q: %+v, then %+v", b, st, again)
		}
	})
}

func invert(m map[string]int32) map[int32]string {
	out := make(map[int32]string, len(m))
	for k, v := range m {
		out[v] = k
	}
	return out
}

var (
	meminfoNames = invert(meminfoKeys)
	vmstatNames  = invert(vmstatKeys)
)

func FuzzParseMeminfo(f *testing.F) {
	f.Add([]byte(fakeMeminfo))
	f.Add([]byte("MemTotal: 12 MB\nnocolon 5 kB\nMemFree:\n: 5 kB\nCached: 9 kB"))
	f.Fuzz(func(t *testing.T, b []byte) {
		kv, bad := parseMeminfo(nil, b)
		if lines := bytes.Count(b, []byte("\n")) + 1; len(kv)+bad > lines {
			t.Fatalf("%d entries and %d bad lines from %d lines", len(kv), bad, lines)
		}
		var out []byte
		for _, e := range kv {
			name, ok := meminfoNames[e.Key]
			if !ok {
				t.Fatalf("key %d is not a MeminfoCounters value", e.Key)
			}
			out = fmt.Appendf(out, "%s:\t%d kB\n", name, e.Value)
		}
		again, bad := parseMeminfo(nil, out)
		if bad != 0 || !reflect.DeepEqual(again, kv) {
			t.Fatalf("round trip: %v, then %v (%d bad)", kv, again, bad)
		}
	})
}

func FuzzParseVmstat(f *testing.F) {
	f.Add([]byte(fakeVmstat))
	f.Add([]byte("nr_free_pages -3\npgfault\npgmajfault 1 2\nnr_mapped x\n\n  \nnr_dirty 4"))
	f.Fuzz(func(t *testing.T, b []byte) {
		kv, bad := parseVmstat(nil, b)
		if lines := bytes.Count(b, []byte("\n")) + 1; len(kv)+bad > lines {
			t.Fatalf("%d entries and %d bad lines from %d lines", len(kv), bad, lines)
		}
		var out []byte
		for _, e := range kv {
			name, ok := vmstatNames[e.Key]
			if !ok {
				t.Fatalf("key %d is not a VmstatCounters value", e.Key)
			}
			out = fmt.Appendf(out, "%s %d\n", name, e.Value)
		}
		again, bad := parseVmstat(nil, out)
		if bad != 0 || !reflect.DeepEqual(again, kv) {
			t.Fatalf("round trip: %v, then %v (%d bad)", kv, again, bad)
		}
	})
}

func FuzzParseProcStatFile(f *testing.F) {
	f.Add([]byte(fakeStat))
	f.Add([]byte("cpu0 1 2 3 4\ncpu1 1 2 3 4 5 6 7\ncpu2 1 2 3\ncpux 1 2 3 4\nintr\nprocesses y\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, _ := parseProcStatFile(nil, b)
		var out []byte
		for _, c := range st.CPUs {
			out = fmt.Appendf(out, "cpu%d %d %d %d %d %d %d %d %d 0 0\n", c.CPU, c.User, c.Nice, c.System, c.Idle, c.IOWait, c.IRQ, c.SoftIRQ, c.Steal)
		}
		if st.HasIRQTotal {
			out = fmt.Appendf(out, "intr %d 0 1\n", st.IRQTotal)
		}
		if st.HasSoftIRQTotal {
			out = fmt.Appendf(out, "softirq %d 2\n", st.SoftIRQTotal)
		}
		if st.HasForks {
			out = fmt.Appendf(out, "processes %d\n", st.Forks)
		}
		again, bad := parseProcStatFile(nil, out)
		if bad != 0 || !reflect.DeepEqual(again, st) {
			t.Fatalf("round trip: %+v, then %+v (%d bad)", st, again, bad)
		}
	})
}
