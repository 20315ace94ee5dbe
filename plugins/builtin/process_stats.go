package builtin

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/tracepipe/tracepipe/internal/wire"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/plugins"
)

// ProcessStatsName is the registered name of the process tree source.
const ProcessStatsName = "linux.process_stats"

// ProcessStatsMinPollMs is the smallest non-zero proc_stats_poll_ms.
const ProcessStatsMinPollMs = 100

// maxTreeBytes bounds the ProcessTree of one packet: a scan is split into
// packets of at most about 64 KiB.
const maxTreeBytes = 64<<10 - 256

// ProcessStatsConfig is the parsed config of a linux.process_stats
// instance (a subset of Perfetto's ProcessStatsConfig).
type ProcessStatsConfig struct {
	// ScanAllProcessesOnStart scans /proc when the instance starts
	// (key scan_all_processes_on_start, default true).
	ScanAllProcessesOnStart bool
	// RecordThreadNames puts each thread's comm in ProcessTree.Thread.name
	// (key record_thread_names, default true).
	RecordThreadNames bool
	// ProcStatsPollMs rescans the process tree at this period; 0 = off
	// (key proc_stats_poll_ms, 0 or >= 100, default 0).
	ProcStatsPollMs int64
}

// DefaultProcessStatsConfig is the config of an empty or nil map.
func DefaultProcessStatsConfig() ProcessStatsConfig {
	return ProcessStatsConfig{ScanAllProcessesOnStart: true, RecordThreadNames: true}
}

// ParseProcessStatsConfig validates a linux.process_stats config map.
func ParseProcessStatsConfig(m map[string]any) (ProcessStatsConfig, error) {
	c := DefaultProcessStatsConfig()
	r := newConfigReader(m)
	c.ScanAllProcessesOnStart = r.boolKey("scan_all_processes_on_start", c.ScanAllProcessesOnStart)
	c.RecordThreadNames = r.boolKey("record_thread_names", c.RecordThreadNames)
	c.ProcStatsPollMs = r.intKey("proc_stats_poll_ms", c.ProcStatsPollMs, offOrAtLeast(ProcessStatsMinPollMs))
	if err := r.err(); err != nil {
		return ProcessStatsConfig{}, err
	}
	return c, nil
}

// ProcessStats is a linux.process_stats instance: on start (if
// configured), on every ClearIncrementalState and every poll period, its
// goroutine scans /proc and writes the process tree as ProcessTree packets
// of at most about 64 KiB each. Every packet's timestamp is when its part
// of the scan began and its collection_end_timestamp when it ended.
//
// A writer's first packet also carries first_packet_on_sequence and
// sequence_flags = CLEARED; no packet needs incremental state.
//
// Each process gives a Process {pid, ppid, cmdline..., uid} (a process with
// an empty cmdline, such as a kernel thread, gets its comm as the only
// cmdline entry and cmdline_is_comm = true; kernel threads also get
// is_kthread = true) followed by a Thread {tid, tgid, name} for each of its
// threads other than the main thread, in ascending pid/tid order.
type ProcessStats struct {
	cfg ProcessStatsConfig
	// procRoot is "/proc" except in tests.
	procRoot string

	k       *worker // created with the instance; its goroutine starts in Start
	started bool
	stopped bool

	// Used only by the worker goroutine.
	first     bool
	treeStart uint64
	tree      []byte // ProcessTree fields of the packet being built
	ent       []byte // one Process or Thread
	pkt       []byte
	bufs      [3][]byte // file contents: stat, status, cmdline/comm
	comm      []byte
	args      [][]byte
	ids       []int64
	path      []byte
}

var _ plugins.DataSource = (*ProcessStats)(nil)

// NewProcessStats returns an unstarted instance reading /proc.
func NewProcessStats(cfg ProcessStatsConfig) *ProcessStats {
	return &ProcessStats{cfg: cfg, procRoot: "/proc", first: true, k: newWorker(ProcessStatsName)}
}

// Start opens the writer and starts the goroutine, which scans at once if
// ScanAllProcessesOnStart.
func (p *ProcessStats) Start(h plugins.Host) error {
	if p.started {
		return fmt.Errorf("%s: %w", ProcessStatsName, errAlreadyStarted)
	}
	body := workerBody{tick: p.scan, clear: p.scan}
	if p.cfg.ScanAllProcessesOnStart {
		body.start = p.scan
	}
	if p.cfg.ProcStatsPollMs > 0 {
		body.period = time.Duration(p.cfg.ProcStatsPollMs) * time.Millisecond
	}
	if err := p.k.begin(h, body); err != nil {
		return err
	}
	p.started = true
	return nil
}

// Flush makes the goroutine flush its writer and waits for it.
func (p *ProcessStats) Flush() error {
	if !p.started || p.stopped {
		return nil
	}
	return p.k.flush()
}

// ClearIncrementalState asks the goroutine for a new scan and returns at
// once.
func (p *ProcessStats) ClearIncrementalState() {
	if p.started && !p.stopped {
		p.k.postClear()
	}
}

// Stop ends the goroutine after it has finished its writer. A scan in
// progress (including the start scan) completes first.
func (p *ProcessStats) Stop() error {
	if !p.started || p.stopped {
		return nil
	}
	p.stopped = true
	return p.k.end()
}

// Stats returns the instance's counters. It may be called at any time,
// from any goroutine.
func (p *ProcessStats) Stats() Stats {
	var s Stats
	p.k.c.addTo(&s)
	return s
}

// scan writes the whole process tree.
func (p *ProcessStats) scan() {
	pids, err := p.listIDs(p.procRoot)
	if err != nil {
		p.k.c.readErrors.Add(1)
		return
	}
	pids = slices.Clone(pids) // listIDs reuses p.ids for the task lists
	p.tree = p.tree[:0]
	p.treeStart = bootNanos()
	// A scan always runs to the end, even when Stop is waiting: a trace
	// with half a process tree is worse than a Stop a few milliseconds
	// later.
	for _, pid := range pids {
		p.addProcess(pid)
	}
	p.emitTree()
}

// listIDs returns the numeric entries of dir, ascending.
func (p *ProcessStats) listIDs(dir string) ([]int64, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	ids := p.ids[:0]
	for _, n := range names {
		if id, err := strconv.ParseInt(n, 10, 64); err == nil && id > 0 && n[0] != '+' {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	p.ids = ids
	return ids, nil
}

// read reads root/id/name (or root/id/task/tid/name) into bufs[slot]. A
// vanished process is reported as ok = false without counting; any other
// failure is counted.
func (p *ProcessStats) read(slot int, name string, ids ...int64) ([]byte, bool) {
	path := append(p.path[:0], p.procRoot...)
	for i, id := range ids {
		if i > 0 {
			path = append(path, "/task"...)
		}
		path = append(path, '/')
		path = strconv.AppendInt(path, id, 10)
	}
	path = append(path, '/')
	path = append(path, name...)
	p.path = path
	b, err := readFileInto(p.bufs[slot], string(path))
	p.bufs[slot] = b
	if err != nil {
		if !isVanished(err) {
			p.k.c.readErrors.Add(1)
		}
		return nil, false
	}
	return b, true
}

func (p *ProcessStats) addProcess(pid int64) {
	stat, ok := p.read(0, "stat", pid)
	if !ok {
		return
	}
	st, err := parseProcStat(stat)
	if err != nil {
		p.k.c.readErrors.Add(1)
		return
	}
	status, ok := p.read(1, "status", pid)
	if !ok {
		return
	}
	uid, err := parseStatusUID(status)
	if err != nil {
		p.k.c.readErrors.Add(1)
		return
	}
	cmdline, ok := p.read(2, "cmdline", pid)
	if !ok {
		return
	}
	p.args = splitCmdline(p.args[:0], cmdline)

	e := p.ent[:0]
	e = wire.AppendVarint(e, procPID, uint64(pid))
	e = wire.AppendVarint(e, procPPID, uint64(st.PPID))
	if len(p.args) > 0 {
		for _, a := range p.args {
			e = wire.AppendBytes(e, procCmdline, a)
		}
	} else {
		e = wire.AppendBytes(e, procCmdline, st.Comm)
	}
	e = wire.AppendVarint(e, procUID, uint64(uid))
	if st.Flags&pfKthread != 0 {
		e = wire.AppendVarint(e, procIsKthread, 1)
	}
	if len(p.args) == 0 {
		e = wire.AppendVarint(e, procCmdlineIsComm, 1)
	}
	p.ent = e
	p.addEntry(ptProcesses)

	// Threads: tasks of the process other than its main thread.
	taskDir := append(append(append(p.path[:0], p.procRoot...), '/'), strconv.FormatInt(pid, 10)+"/task"...)
	tids, err := p.listIDs(string(taskDir))
	if err != nil {
		if !isVanished(err) {
			p.k.c.readErrors.Add(1)
		}
		return
	}
	tids = slices.Clone(tids)
	for _, tid := range tids {
		if tid == pid {
			continue
		}
		e := p.ent[:0]
		e = wire.AppendVarint(e, thrTID, uint64(tid))
		if p.cfg.RecordThreadNames {
			comm, ok := p.read(2, "comm", pid, tid)
			if !ok {
				continue
			}
			comm = bytes.TrimSuffix(comm, []byte{'\n'})
			e = wire.AppendBytes(e, thrName, comm)
		}
		e = wire.AppendVarint(e, thrTGID, uint64(pid))
		p.ent = e
		p.addEntry(ptThreads)
	}
}

// addEntry appends p.ent as field num of the ProcessTree being built,
// emitting the tree first if the entry would make it too big.
func (p *ProcessStats) addEntry(num protowire.Number) {
	if len(p.tree) > 0 && len(p.tree)+lenFieldSize(len(p.ent)) > maxTreeBytes {
		p.emitTree()
		p.treeStart = bootNanos()
	}
	p.tree = wire.AppendBytes(p.tree, num, p.ent)
}

// emitTree writes the ProcessTree built so far (if any) as one packet.
func (p *ProcessStats) emitTree() {
	if len(p.tree) == 0 {
		return
	}
	p.tree = wire.AppendVarint(p.tree, ptCollectionEndTimestamp, bootNanos())
	b := p.pkt[:0]
	b = wire.AppendVarint(b, pktTimestamp, p.treeStart)
	if p.first {
		p.first = false
		// The general rule for a writer's first packet; these packets
		// need no incremental state, so later ones carry no flags.
		b = wire.AppendVarint(b, pktSequenceFlags, seqIncrementalStateCleared)
		b = wire.AppendVarint(b, pktFirstPacketOnSequence, 1)
	}
	b = wire.AppendBytes(b, pktProcessTree, p.tree)
	p.pkt = b
	p.k.c.write(p.k.w, b)
	p.tree = p.tree[:0]
}
