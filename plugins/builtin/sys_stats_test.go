package builtin

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
)

const fakeMeminfo = `MemTotal:       16384000 kB
MemFree:         1234567 kB
MemAvailable:    8000000 kB
Buffers:          100000 kB
Cached:          2000000 kB
Active(anon):     300000 kB
Inactive(file):   400000 kB
SReclaimable:      50000 kB
Committed_AS:    9999999 kB
UnknownThing:         42 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
CmaFree:               7 kB
`

var wantMeminfo = []counterValue{{1, 16384000}, {2, 1234567}, {3, 8000000}, {4, 100000}, {5, 2000000},
	{9, 300000}, {12, 400000}, {23, 50000}, {28, 9999999}, {33, 7}}

const fakeVmstat = `nr_free_pages 123456
nr_zone_inactive_anon 5
nr_inactive_anon 1000
nr_dirty_threshold 99
pgfault 555555555
pgmajfault 12
workingset_refault_anon 1
oom_kill 0
allocstall 3
nr_gpu_heap 77
`

var wantVmstat = []counterValue{{1, 123456}, {3, 1000}, {36, 99}, {49, 555555555}, {50, 12}, {73, 3}, {95, 77}}

const fakeStat = `cpu  100 2 30 4000 5 6 7 8 0 0
cpu0 50 1 15 2000 2 3 4 5 0 0
cpu1 50 1 15 2000 3 3 3 3 0 0
intr 123456 1 2 3 0 0
ctxt 999
btime 1700000000
processes 4242
procs_running 2
procs_blocked 0
softirq 7890 1 2 3 4 5 6 7 8 9 10
`

// wantCPUs is fakeStat's per-CPU lines in nanoseconds (USER_HZ = 100).
var wantCPUs = []cpuTimes{
	{CPU: 0, User: 50e7, Nice: 1e7, System: 15e7, Idle: 2000e7, IOWait: 2e7, IRQ: 3e7, SoftIRQ: 4e7, Steal: 5e7},
	{CPU: 1, User: 50e7, Nice: 1e7, System: 15e7, Idle: 2000e7, IOWait: 3e7, IRQ: 3e7, SoftIRQ: 3e7, Steal: 3e7},
}

func buildFakeSysProc(t testing.TB) string {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "meminfo"), fakeMeminfo)
	writeFile(t, filepath.Join(root, "vmstat"), fakeVmstat)
	writeFile(t, filepath.Join(root, "stat"), fakeStat)
	return root
}

type tsysstats struct {
	meminfo, vmstat                   []counterValue
	cpus                              []cpuTimes
	forks, irq, softirq               uint64
	hasForks, hasIRQ, hasSoftIRQ, has bool
}

// decodeSysStats decodes one SysStats packet and checks its framing.
func decodeSysStats(t testing.TB, p []byte, first bool) tsysstats {
	t.Helper()
	checkProducerPacket(t, p)
	fs := decode(t, p)
	ts, ok := one(t, fs, pktTimestamp)
	if !ok {
		t.Fatal("no timestamp")
	}
	if _, ok := one(t, fs, pktFirstPacketOnSequence); ok != first {
		t.Fatalf("first_packet_on_sequence %v, want %v", ok, first)
	}
	if f, ok := one(t, fs, pktSequenceFlags); ok != first || (ok && f.v != seqIncrementalStateCleared) {
		t.Fatalf("sequence_flags present=%v value %d, want CLEARED on the first packet only", ok, f.v)
	}
	if len(fs) != map[bool]int{true: 4, false: 2}[first] {
		t.Fatalf("fields %+v", fs)
	}
	ss, ok := one(t, fs, pktSysStats)
	if !ok {
		t.Fatalf("no sys_stats in %+v", fs)
	}
	var out tsysstats
	out.has = true
	sawEnd := false
	for _, f := range decode(t, ss.b) {
		switch f.num {
		case ssMeminfo, ssVmstat:
			var kv counterValue
			for _, g := range decode(t, f.b) {
				switch g.num {
				case kvKey:
					kv.Key = int32(g.v)
				case kvValue:
					kv.Value = g.v
				default:
					t.Fatalf("unexpected key/value field %d", g.num)
				}
			}
			if f.num == ssMeminfo {
				out.meminfo = append(out.meminfo, kv)
			} else {
				out.vmstat = append(out.vmstat, kv)
			}
		case ssCPUStat:
			var c cpuTimes
			dst := map[int]*uint64{cpuUser: &c.User, cpuUserNice: &c.Nice, cpuSystem: &c.System, cpuIdle: &c.Idle,
				cpuIoWait: &c.IOWait, cpuIrq: &c.IRQ, cpuSoftirq: &c.SoftIRQ, cpuStealTime: &c.Steal}
			for _, g := range decode(t, f.b) {
				if g.num == cpuID {
					c.CPU = uint32(g.v)
				} else if d, ok := dst[int(g.num)]; ok {
					*d = g.v
				} else {
					t.Fatalf("unexpected CpuTimes field %d", g.num)
				}
			}
			out.cpus = append(out.cpus, c)
		case ssNumForks:
			out.forks, out.hasForks = f.v, true
		case ssNumIrqTotal:
			out.irq, out.hasIRQ = f.v, true
		case ssNumSoftirqTotal:
			out.softirq, out.hasSoftIRQ = f.v, true
		case ssCollectionEndTimestamp:
			sawEnd = true
			if f.v < ts.v {
				t.Fatalf("collection_end_timestamp %d < timestamp %d", f.v, ts.v)
			}
		default:
			t.Fatalf("unexpected SysStats field %d", f.num)
		}
	}
	if !sawEnd {
		t.Fatal("no collection_end_timestamp")
	}
	return out
}

func checkFakeSysStats(t testing.TB, s tsysstats, mem, vm, stat bool) {
	t.Helper()
	if mem != (s.meminfo != nil) || (mem && !reflect.DeepEqual(s.meminfo, wantMeminfo)) {
		t.Errorf("meminfo (want present: %v)\n got %v\nwant %v", mem, s.meminfo, wantMeminfo)
	}
	if vm != (s.vmstat != nil) || (vm && !reflect.DeepEqual(s.vmstat, wantVmstat)) {
		t.Errorf("vmstat (want present: %v)\n got %v\nwant %v", vm, s.vmstat, wantVmstat)
	}
	if !stat {
		if s.cpus != nil || s.hasForks || s.hasIRQ || s.hasSoftIRQ {
			t.Errorf("/proc/stat values present: %+v", s)
		}
		return
	}
	if !reflect.DeepEqual(s.cpus, wantCPUs) {
		t.Errorf("cpu_stat\n got %+v\nwant %+v", s.cpus, wantCPUs)
	}
	if !s.hasForks || s.forks != 4242 || !s.hasIRQ || s.irq != 123456 || !s.hasSoftIRQ || s.softirq != 7890 {
		t.Errorf("totals: forks %v %d, irq %v %d, softirq %v %d", s.hasForks, s.forks, s.hasIRQ, s.irq, s.hasSoftIRQ, s.softirq)
	}
}

func runSysStats(t *testing.T, cfg SysStatsConfig, root string, packets int) ([][]byte, Stats) {
	t.Helper()
	ds := NewSysStats(cfg)
	ds.procRoot = root
	h := &fakeHost{}
	if err := ds.Start(h); err != nil {
		t.Fatal(err)
	}
	testsupport.WaitUntil(t, "samples", 10*time.Second, func() bool { return ds.Stats().Packets >= uint64(packets) })
	if err := ds.Stop(); err != nil {
		t.Fatal(err)
	}
	checkWritersSane(t, h)
	got, _, _, _ := h.writer(0).snapshot()
	return got, ds.Stats()
}

// TestSysStatsFakeProc runs on synctest's fake clock, so every tick of
// the 10 ms period happens and the per-tick pattern is exact.
func TestSysStatsFakeProc(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := buildFakeSysProc(t)
		// Ticks every 10 ms: meminfo at every tick, vmstat at every other
		// tick, /proc/stat never.
		got, st := runSysStats(t, SysStatsConfig{MeminfoPeriodMs: 10, VmstatPeriodMs: 20}, root, 5)
		for i, p := range got {
			checkFakeSysStats(t, decodeSysStats(t, p, i == 0), true, i%2 == 0, false)
		}
		if st.ReadErrors != 0 || st.WriteErrors != 0 {
			t.Fatalf("stats %+v", st)
		}
		// /proc/stat only, every 30 ms (one tick per period).
		got, _ = runSysStats(t, SysStatsConfig{StatPeriodMs: 30}, root, 2)
		for i, p := range got {
			checkFakeSysStats(t, decodeSysStats(t, p, i == 0), false, false, true)
		}
		// Periods 20 and 30 tick every 10 ms; nothing is due at ticks 1, 5, 7.
		got, _ = runSysStats(t, SysStatsConfig{MeminfoPeriodMs: 20, StatPeriodMs: 30}, root, 5)
		pattern := [][2]bool{{true, true}, {true, false}, {false, true}, {true, false}, {true, true}}
		for i, p := range got[:5] {
			checkFakeSysStats(t, decodeSysStats(t, p, i == 0), pattern[i][0], false, pattern[i][1])
		}
	})
}

// TestSysStatsAllOffAndMissingFiles runs on synctest's fake clock: a
// second of it passes with every period 0 and nothing may be written.
func TestSysStatsAllOffAndMissingFiles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ds := NewSysStats(SysStatsConfig{})
		h := &fakeHost{}
		if err := ds.Start(h); err != nil {
			t.Fatal(err)
		}
		ds.ClearIncrementalState()
		if err := ds.Flush(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		if err := ds.Stop(); err != nil {
			t.Fatal(err)
		}
		checkWritersSane(t, h)
		if n := h.writer(0).count(); n != 0 {
			t.Fatalf("%d packets with every period 0", n)
		}

		ds = NewSysStats(SysStatsConfig{MeminfoPeriodMs: 10, StatPeriodMs: 10})
		ds.procRoot = filepath.Join(t.TempDir(), "missing")
		h = &fakeHost{}
		if err := ds.Start(h); err != nil {
			t.Fatal(err)
		}
		testsupport.WaitUntil(t, "read errors", 5*time.Second, func() bool { return ds.Stats().ReadErrors >= 4 })
		if err := ds.Stop(); err != nil {
			t.Fatal(err)
		}
		if n := h.writer(0).count(); n != 0 {
			t.Fatalf("%d packets without any readable file", n)
		}
	})
}

func TestSysStatsRealProc(t *testing.T) {
	// sys_stats exists for Linux's /proc: without it this test fails
	// rather than passing without having read anything.
	if _, err := os.Stat("/proc/meminfo"); err != nil {
		t.Fatalf("sys_stats reads the real /proc: %v", err)
	}
	got, st := runSysStats(t, DefaultSysStatsConfig(), "/proc", 1)
	s := decodeSysStats(t, got[0], true)
	if st.ReadErrors != 0 {
		t.Errorf("%d read errors on the real /proc", st.ReadErrors)
	}
	if len(s.meminfo) < 10 || s.meminfo[0].Key != 1 || s.meminfo[0].Value == 0 {
		t.Errorf("meminfo %v", s.meminfo)
	}
	if len(s.vmstat) < 10 {
		t.Errorf("vmstat %v", s.vmstat)
	}
	if len(s.cpus) < 1 || !s.hasForks || s.forks == 0 || !s.hasIRQ || !s.hasSoftIRQ {
		t.Errorf("stat: %d cpus, forks %v %d, irq %v, softirq %v", len(s.cpus), s.hasForks, s.forks, s.hasIRQ, s.hasSoftIRQ)
	}
	for _, c := range s.cpus {
		if c.Idle%nsPerTick != 0 {
			t.Errorf("cpu %d idle %d ns is not a whole number of ticks", c.CPU, c.Idle)
		}
	}
}

func TestParseMeminfoVmstatStat(t *testing.T) {
	kv, bad := parseMeminfo(nil, []byte(fakeMeminfo))
	if !reflect.DeepEqual(kv, wantMeminfo) || bad != 0 {
		t.Fatalf("meminfo %v bad %d", kv, bad)
	}
	kv, bad = parseMeminfo(nil, []byte("MemTotal: 12 MB\nnocolon 5 kB\nMemFree:\nBuffers: x kB\n: 5 kB\n\nCached: 9 kB"))
	if !reflect.DeepEqual(kv, []counterValue{{5, 9}}) || bad != 5 {
		t.Fatalf("bad meminfo: %v, %d bad lines", kv, bad)
	}
	kv, bad = parseVmstat(nil, []byte(fakeVmstat))
	if !reflect.DeepEqual(kv, wantVmstat) || bad != 0 {
		t.Fatalf("vmstat %v bad %d", kv, bad)
	}
	kv, bad = parseVmstat(nil, []byte("nr_free_pages -3\npgfault\npgmajfault 1 2\nnr_mapped x\n\n  \nnr_dirty 4"))
	if !reflect.DeepEqual(kv, []counterValue{{1, 1<<64 - 3}, {12, 4}}) || bad != 3 {
		t.Fatalf("bad vmstat: %v, %d bad lines", kv, bad)
	}
	st, bad := parseProcStatFile(nil, []byte(fakeStat))
	if bad != 0 || len(st.CPUs) != 2 || st.Forks != 4242 || st.IRQTotal != 123456 || st.SoftIRQTotal != 7890 {
		t.Fatalf("stat %+v bad %d", st, bad)
	}
	// Old kernels: 4 or 7 columns; malformed lines are counted.
	st, bad = parseProcStatFile(nil, []byte("cpu0 1 2 3 4\ncpu1 1 2 3 4 5 6 7\ncpu2 1 2 3\ncpux 1 2 3 4\ncpu3 1 2 x 4\nintr\nprocesses y\n"))
	want := []cpuTimes{{CPU: 0, User: 1, Nice: 2, System: 3, Idle: 4}, {CPU: 1, User: 1, Nice: 2, System: 3, Idle: 4, IOWait: 5, IRQ: 6, SoftIRQ: 7}}
	if !reflect.DeepEqual(st.CPUs, want) || bad != 5 || st.HasForks || st.HasIRQTotal {
		t.Fatalf("old/bad stat: %+v, %d bad lines", st, bad)
	}
}

func TestSysStatsCounterTables(t *testing.T) {
	// The enum values are Perfetto's; spot-check a few against
	// sys_stats_counters.proto and make sure none is duplicated.
	for name, want := range map[string]int32{"MemTotal": 1, "Active(anon)": 9, "SUnreclaim": 24, "Committed_AS": 28, "CmaFree": 33} {
		if meminfoKeys[name] != want {
			t.Errorf("meminfo %s = %d, want %d", name, meminfoKeys[name], want)
		}
	}
	for name, want := range map[string]int32{"nr_free_pages": 1, "pgpgin": 38, "pgfault": 49, "allocstall": 73, "nr_gpu_heap": 95} {
		if vmstatKeys[name] != want {
			t.Errorf("vmstat %s = %d, want %d", name, vmstatKeys[name], want)
		}
	}
	for _, m := range []map[string]int32{meminfoKeys, vmstatKeys} {
		seen := map[int32]string{}
		for k, v := range m {
			if other, dup := seen[v]; dup {
				t.Errorf("enum %d used by %s and %s", v, k, other)
			}
			seen[v] = k
		}
	}
	if len(meminfoKeys) != 33 || len(vmstatKeys) != 95 {
		t.Errorf("%d meminfo and %d vmstat keys", len(meminfoKeys), len(vmstatKeys))
	}
}
