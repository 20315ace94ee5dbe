package builtin

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
)

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func statusFile(name string, pid, ppid, uid int) string {
	return fmt.Sprintf("Name:\t%s\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t%d\nNgid:\t0\nPid:\t%d\nPPid:\t%d\nTracerPid:\t0\nUid:\t%d\t%d\t%d\t%d\nGid:\t0\t0\t0\t0\n",
		name, pid, pid, ppid, uid, uid+1, uid, uid)
}

// statLine is a realistic /proc/PID/stat line (52 fields).
func statLine(pid int, comm string, state byte, ppid int, flags uint64) string {
	return fmt.Sprintf("%d (%s) %c %d %d %d 0 -1 %d 1234 0 5 0 12 34 0 0 20 0 1 0 5678 10000000 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
		pid, comm, state, ppid, pid, pid, flags)
}

// buildFakeProc writes a small /proc tree:
//
//	1   systemd, cmdline "/sbin/init splash", uid 0, no other thread
//	2   kthreadd: kernel thread (PF_KTHREAD), empty cmdline
//	42  comm "a) (b c", cmdline "weird" "" "--flag=x y", uid 1000, threads
//	    42, 43 ("worker 1") and 44 (vanished: no comm file)
//	50  vanished: empty directory
//	60  malformed stat (a read error)
//
// plus entries that are not processes (self, meminfo, 1a).
func buildFakeProc(t testing.TB) string {
	root := t.TempDir()
	p := func(parts ...string) string { return filepath.Join(append([]string{root}, parts...)...) }
	writeFile(t, p("1", "stat"), statLine(1, "systemd", 'S', 0, 0x400100))
	writeFile(t, p("1", "status"), statusFile("systemd", 1, 0, 0))
	writeFile(t, p("1", "cmdline"), "/sbin/init\x00splash\x00")
	writeFile(t, p("1", "task", "1", "comm"), "systemd\n")

	writeFile(t, p("2", "stat"), statLine(2, "kthreadd", 'S', 0, 0x208040))
	writeFile(t, p("2", "status"), statusFile("kthreadd", 2, 0, 0))
	writeFile(t, p("2", "cmdline"), "")
	writeFile(t, p("2", "task", "2", "comm"), "kthreadd\n")

	writeFile(t, p("42", "stat"), statLine(42, "a) (b c", 'R', 1, 0x400000))
	writeFile(t, p("42", "status"), statusFile("a) (b c", 42, 1, 1000))
	writeFile(t, p("42", "cmdline"), "weird\x00\x00--flag=x y\x00")
	writeFile(t, p("42", "task", "42", "comm"), "a) (b c\n")
	writeFile(t, p("42", "task", "43", "comm"), "worker 1\n")
	if err := os.MkdirAll(p("42", "task", "44"), 0o755); err != nil {
		t.Fatal(err)
	}

	if err := os.MkdirAll(p("50"), 0o755); err != nil {
		t.Fatal(err)
	}

	writeFile(t, p("60", "stat"), "garbage\n")
	writeFile(t, p("60", "status"), statusFile("x", 60, 1, 0))
	writeFile(t, p("60", "cmdline"), "x\x00")

	writeFile(t, p("self", "stat"), statLine(7, "self", 'S', 1, 0))
	writeFile(t, p("meminfo"), "MemTotal: 1 kB\n")
	writeFile(t, p("1a", "stat"), statLine(1, "bad", 'S', 1, 0))
	return root
}

type tproc struct {
	PID, PPID, UID       uint64
	Cmdline              []string
	Kthread, CmdlineComm bool
}

type tthread struct {
	TID, TGID uint64
	Name      string
	HasName   bool
}

// decodeTrees decodes ProcessTree packets, checking their framing: a
// timestamp, collection_end_timestamp >= it, first_packet_on_sequence on
// the first packet only when first.
func decodeTrees(t testing.TB, packets [][]byte, first bool) ([]tproc, []tthread) {
	t.Helper()
	var procs []tproc
	var threads []tthread
	for i, p := range packets {
		checkProducerPacket(t, p)
		fs := decode(t, p)
		ts, ok := one(t, fs, pktTimestamp)
		if !ok {
			t.Fatalf("packet %d: no timestamp", i)
		}
		if _, ok := one(t, fs, pktFirstPacketOnSequence); ok != (first && i == 0) {
			t.Fatalf("packet %d: first_packet_on_sequence %v", i, ok)
		}
		// sequence_flags = CLEARED on a writer's first packet only: a
		// ProcessTree needs no incremental state.
		if f, ok := one(t, fs, pktSequenceFlags); ok != (first && i == 0) || (ok && f.v != seqIncrementalStateCleared) {
			t.Fatalf("packet %d: sequence_flags present=%v value %d", i, ok, f.v)
		}
		pt, ok := one(t, fs, pktProcessTree)
		if !ok || len(fs) != map[bool]int{true: 4, false: 2}[first && i == 0] {
			t.Fatalf("packet %d: fields %+v", i, fs)
		}
		tree := decode(t, pt.b)
		end, ok := one(t, tree, ptCollectionEndTimestamp)
		if !ok || end.v < ts.v {
			t.Fatalf("packet %d: collection_end_timestamp %d, timestamp %d", i, end.v, ts.v)
		}
		for _, f := range tree {
			switch f.num {
			case ptProcesses:
				var pr tproc
				for _, g := range decode(t, f.b) {
					switch g.num {
					case procPID:
						pr.PID = g.v
					case procPPID:
						pr.PPID = g.v
					case procCmdline:
						pr.Cmdline = append(pr.Cmdline, string(g.b))
					case procUID:
						pr.UID = g.v
					case procIsKthread:
						pr.Kthread = g.v == 1
					case procCmdlineIsComm:
						pr.CmdlineComm = g.v == 1
					default:
						t.Fatalf("unexpected Process field %d", g.num)
					}
				}
				procs = append(procs, pr)
			case ptThreads:
				var th tthread
				for _, g := range decode(t, f.b) {
					switch g.num {
					case thrTID:
						th.TID = g.v
					case thrTGID:
						th.TGID = g.v
					case thrName:
						th.Name, th.HasName = string(g.b), true
					default:
						t.Fatalf("unexpected Thread field %d", g.num)
					}
				}
				threads = append(threads, th)
			case ptCollectionEndTimestamp:
			default:
				t.Fatalf("unexpected ProcessTree field %d", f.num)
			}
		}
	}
	return procs, threads
}

func checkFakeTree(t testing.TB, procs []tproc, threads []tthread, names bool) {
	t.Helper()
	wantProcs := []tproc{
		{PID: 1, PPID: 0, UID: 0, Cmdline: []string{"/sbin/init", "splash"}},
		{PID: 2, PPID: 0, UID: 0, Cmdline: []string{"kthreadd"}, Kthread: true, CmdlineComm: true},
		{PID: 42, PPID: 1, UID: 1000, Cmdline: []string{"weird", "", "--flag=x y"}},
	}
	wantThreads := []tthread{{TID: 43, TGID: 42, Name: "worker 1", HasName: true}}
	if !names {
		wantThreads = []tthread{{TID: 43, TGID: 42}, {TID: 44, TGID: 42}}
	}
	if !reflect.DeepEqual(procs, wantProcs) {
		t.Errorf("processes\n got %+v\nwant %+v", procs, wantProcs)
	}
	if !reflect.DeepEqual(threads, wantThreads) {
		t.Errorf("threads\n got %+v\nwant %+v", threads, wantThreads)
	}
}

func TestProcessStatsFakeTree(t *testing.T) {
	root := buildFakeProc(t)
	for _, names := range []bool{true, false} {
		t.Run(fmt.Sprint("names=", names), func(t *testing.T) {
			cfg := DefaultProcessStatsConfig()
			cfg.RecordThreadNames = names
			ds := NewProcessStats(cfg)
			ds.procRoot = root
			h := &fakeHost{}
			if err := ds.Start(h); err != nil {
				t.Fatal(err)
			}
			if err := ds.Flush(); err != nil { // the start scan runs before the flush
				t.Fatal(err)
			}
			packets, committed, _, _ := h.writer(0).snapshot()
			if len(packets) != 1 || committed != 1 {
				t.Fatalf("%d packets (%d committed) after the start scan and a flush", len(packets), committed)
			}
			if err := ds.Stop(); err != nil {
				t.Fatal(err)
			}
			checkWritersSane(t, h)
			procs, threads := decodeTrees(t, packets, true)
			checkFakeTree(t, procs, threads, names)
			if st := ds.Stats(); st.ReadErrors != 1 || st.Packets != 1 || st.WriteErrors != 0 {
				t.Fatalf("stats %+v, want exactly 1 read error (pid 60's stat)", st)
			}
		})
	}
}

// TestProcessStatsClearRescans runs on synctest's fake clock: the clears
// only post a request, so they let no time pass.
func TestProcessStatsClearRescans(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := buildFakeProc(t)
		cfg := DefaultProcessStatsConfig()
		cfg.ScanAllProcessesOnStart = false
		ds := NewProcessStats(cfg)
		ds.procRoot = root
		h := &fakeHost{}
		if err := ds.Start(h); err != nil {
			t.Fatal(err)
		}
		defer ds.Stop()
		if err := ds.Flush(); err != nil {
			t.Fatal(err)
		}
		if n := h.writer(0).count(); n != 0 {
			t.Fatalf("%d packets without scan_all_processes_on_start", n)
		}
		t0 := time.Now()
		for range 5 {
			ds.ClearIncrementalState()
		}
		if d := time.Since(t0); d != 0 {
			t.Fatalf("ClearIncrementalState let %v pass on the fake clock: it waited for the worker", d)
		}
		testsupport.WaitUntil(t, "a scan after the clears", 5*time.Second, func() bool { return h.writer(0).count() >= 1 })
		if err := ds.Flush(); err != nil {
			t.Fatal(err)
		}
		ds.ClearIncrementalState()
		testsupport.WaitUntil(t, "a scan after one more clear", 5*time.Second, func() bool { return h.writer(0).count() >= 2 })
		if err := ds.Stop(); err != nil {
			t.Fatal(err)
		}
		checkWritersSane(t, h)
		packets, _, _, _ := h.writer(0).snapshot()
		if len(packets) > 6 {
			t.Fatalf("%d scans for 6 clears", len(packets))
		}
		procs, threads := decodeTrees(t, packets[:1], true)
		checkFakeTree(t, procs, threads, true)
		procs, threads = decodeTrees(t, packets[1:2], false)
		checkFakeTree(t, procs, threads, true)
	})
}

func TestProcessStatsPoll(t *testing.T) {
	root := buildFakeProc(t)
	ds := NewProcessStats(ProcessStatsConfig{ScanAllProcessesOnStart: true, RecordThreadNames: true, ProcStatsPollMs: 100})
	ds.procRoot = root
	h := &fakeHost{}
	if err := ds.Start(h); err != nil {
		t.Fatal(err)
	}
	testsupport.WaitUntil(t, "start scan and two polls", 5*time.Second, func() bool { return h.writer(0).count() >= 3 })
	if err := ds.Stop(); err != nil {
		t.Fatal(err)
	}
	checkWritersSane(t, h)
	packets, _, _, _ := h.writer(0).snapshot()
	for i, p := range packets {
		procs, threads := decodeTrees(t, [][]byte{p}, i == 0)
		checkFakeTree(t, procs, threads, true)
	}
}

func TestProcessStatsSplitsLargeTrees(t *testing.T) {
	root := t.TempDir()
	const n = 500
	arg := strings.Repeat("x", 750)
	for pid := 100; pid < 100+n; pid++ {
		d := filepath.Join(root, fmt.Sprint(pid))
		writeFile(t, filepath.Join(d, "stat"), statLine(pid, "p", 'S', 1, 0))
		writeFile(t, filepath.Join(d, "status"), statusFile("p", pid, 1, 0))
		writeFile(t, filepath.Join(d, "cmdline"), arg+"\x00")
	}
	ds := NewProcessStats(DefaultProcessStatsConfig())
	ds.procRoot = root
	h := &fakeHost{}
	if err := ds.Start(h); err != nil {
		t.Fatal(err)
	}
	if err := ds.Stop(); err != nil {
		t.Fatal(err)
	}
	packets, _, _, _ := h.writer(0).snapshot()
	if len(packets) < 6 {
		t.Fatalf("%d packets for ~%d KiB of process tree", len(packets), n*770/1024)
	}
	for i, p := range packets {
		if len(p) > 64<<10 {
			t.Fatalf("packet %d is %d bytes", i, len(p))
		}
	}
	procs, threads := decodeTrees(t, packets, true)
	if len(procs) != n || len(threads) != 0 {
		t.Fatalf("%d processes and %d threads, want %d and 0", len(procs), len(threads), n)
	}
	for i, pr := range procs {
		if pr.PID != uint64(100+i) || len(pr.Cmdline) != 1 || pr.Cmdline[0] != arg {
			t.Fatalf("process %d: %+v", i, pr)
		}
	}
	if st := ds.Stats(); st.ReadErrors != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestProcessStatsRealProc(t *testing.T) {
	// process_stats exists for Linux's /proc: without it this test fails
	// rather than passing without having read anything.
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Fatalf("process_stats reads the real /proc: %v", err)
	}
	ds := NewProcessStats(DefaultProcessStatsConfig())
	h := &fakeHost{}
	if err := ds.Start(h); err != nil {
		t.Fatal(err)
	}
	if err := ds.Stop(); err != nil {
		t.Fatal(err)
	}
	packets, _, _, _ := h.writer(0).snapshot()
	procs, threads := decodeTrees(t, packets, true)
	self := uint64(os.Getpid())
	var me *tproc
	for i := range procs {
		if procs[i].PID == self {
			me = &procs[i]
		}
	}
	if me == nil {
		t.Fatalf("pid %d not among %d processes", self, len(procs))
	}
	if me.PPID != uint64(os.Getppid()) || me.UID != uint64(os.Getuid()) || !reflect.DeepEqual(me.Cmdline, os.Args) || me.CmdlineComm || me.Kthread {
		t.Fatalf("self = %+v, want ppid %d uid %d cmdline %q", *me, os.Getppid(), os.Getuid(), os.Args)
	}
	mine := 0
	for _, th := range threads {
		if th.TGID == self {
			mine++
			if !th.HasName || th.Name == "" {
				t.Errorf("thread %d has no name", th.TID)
			}
		}
	}
	if mine == 0 {
		t.Fatal("no thread of this (multi-threaded) Go process listed")
	}
	// pid 2 is kthreadd on an ordinary Linux; in a container pid namespace
	// it may be missing, so only check it when it is there.
	for _, pr := range procs {
		if pr.PID == 2 && pr.Cmdline[0] == "kthreadd" && (!pr.Kthread || !pr.CmdlineComm) {
			t.Errorf("kthreadd: %+v", pr)
		}
	}
	t.Logf("%d processes, %d threads in %d packets, stats %+v", len(procs), len(threads), len(packets), ds.Stats())
}

func TestParseProcStat(t *testing.T) {
	for _, c := range []struct {
		in    string
		want  procStat
		error bool
	}{
		{in: statLine(1, "systemd", 'S', 0, 4194560), want: procStat{PID: 1, Comm: []byte("systemd"), State: 'S', PPID: 0, Flags: 4194560}},
		{in: statLine(42, "a) (b c", 'R', 7, 1), want: procStat{PID: 42, Comm: []byte("a) (b c"), State: 'R', PPID: 7, Flags: 1}},
		{in: statLine(5, ")", 'Z', 1, 0), want: procStat{PID: 5, Comm: []byte(")"), State: 'Z', PPID: 1}},
		{in: statLine(5, "", 'Z', 1, 0), want: procStat{PID: 5, Comm: []byte(""), State: 'Z', PPID: 1}},
		{in: statLine(6, "tab\there (x)", 'I', 2, 0x200000), want: procStat{PID: 6, Comm: []byte("tab\there (x)"), State: 'I', PPID: 2, Flags: 0x200000}},
		{in: "9 (x) S 1 2 3 4 5 6", want: procStat{PID: 9, Comm: []byte("x"), State: 'S', PPID: 1, Flags: 6}},
		{in: "9 (x) S 1 2 3 4 5", error: true},
		{in: "9 x S 1 2 3 4 5 6", error: true},
		{in: "(x) S 1 2 3 4 5 6", error: true},
		{in: "9 (x) SS 1 2 3 4 5 6", error: true},
		{in: "9 (x) S -1x 2 3 4 5 6", error: true},
		{in: "9 (x) S 1 2 3 4 5 -6", error: true},
		{in: ")9 (x", error: true},
		{in: "", error: true},
	} {
		got, err := parseProcStat([]byte(c.in))
		if (err != nil) != c.error {
			t.Errorf("parseProcStat(%q) error %v", c.in, err)
			continue
		}
		if !c.error && !reflect.DeepEqual(got, c.want) {
			t.Errorf("parseProcStat(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

func TestParseStatusUIDAndCmdline(t *testing.T) {
	if uid, err := parseStatusUID([]byte(statusFile("x", 1, 0, 1234))); err != nil || uid != 1234 {
		t.Fatalf("uid %d %v", uid, err)
	}
	for _, bad := range []string{"", "Name:\tx\n", "Uid:\n", "Uid:\tabc\t1\n", "Uid:\t-1\n"} {
		if _, err := parseStatusUID([]byte(bad)); err == nil {
			t.Errorf("parseStatusUID(%q) succeeded", bad)
		}
	}
	for in, want := range map[string][]string{
		"":                  nil,
		"\x00":              nil, // an empty argv[0] only: use comm
		"a":                 {"a"},
		"a\x00":             {"a"},
		"a\x00b c\x00":      {"a", "b c"},
		"a\x00\x00b\x00":    {"a", "", "b"},
		"set by prctl only": {"set by prctl only"},
	} {
		var got []string
		for _, a := range splitCmdline(nil, []byte(in)) {
			got = append(got, string(a))
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("splitCmdline(%q) = %q, want %q", in, got, want)
		}
	}
}
