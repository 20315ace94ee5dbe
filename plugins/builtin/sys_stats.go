package builtin

import (
	"fmt"
	"time"

	"github.com/tracepipe/tracepipe/internal/wire"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/plugins"
)

// SysStatsName is the registered name of the system counters source.
const SysStatsName = "linux.sys_stats"

// SysStatsMinPeriodMs is the smallest non-zero period.
const SysStatsMinPeriodMs = 10

// SysStatsConfig is the parsed config of a linux.sys_stats instance (a
// subset of Perfetto's SysStatsConfig). A period of 0 turns its file off.
type SysStatsConfig struct {
	// MeminfoPeriodMs samples /proc/meminfo (key meminfo_period_ms,
	// 0 or >= 10, default 1000).
	MeminfoPeriodMs int64
	// VmstatPeriodMs samples /proc/vmstat (key vmstat_period_ms,
	// 0 or >= 10, default 1000).
	VmstatPeriodMs int64
	// StatPeriodMs samples /proc/stat: per-CPU times, forks, interrupts
	// and softirqs (key stat_period_ms, 0 or >= 10, default 1000).
	StatPeriodMs int64
}

// DefaultSysStatsConfig is the config of an empty or nil map.
func DefaultSysStatsConfig() SysStatsConfig {
	return SysStatsConfig{MeminfoPeriodMs: 1000, VmstatPeriodMs: 1000, StatPeriodMs: 1000}
}

// ParseSysStatsConfig validates a linux.sys_stats config map.
func ParseSysStatsConfig(m map[string]any) (SysStatsConfig, error) {
	c := DefaultSysStatsConfig()
	r := newConfigReader(m)
	c.MeminfoPeriodMs = r.intKey("meminfo_period_ms", c.MeminfoPeriodMs, offOrAtLeast(SysStatsMinPeriodMs))
	c.VmstatPeriodMs = r.intKey("vmstat_period_ms", c.VmstatPeriodMs, offOrAtLeast(SysStatsMinPeriodMs))
	c.StatPeriodMs = r.intKey("stat_period_ms", c.StatPeriodMs, offOrAtLeast(SysStatsMinPeriodMs))
	if err := r.err(); err != nil {
		return SysStatsConfig{}, err
	}
	return c, nil
}

// SysStats is a linux.sys_stats instance. Its goroutine wakes at the
// greatest common divisor of the non-zero periods (and once at start) and
// writes one SysStats packet holding every file that is due: meminfo
// (MeminfoCounters keys, kB), vmstat (VmstatCounters keys), cpu_stat (one
// CpuTimes per CPU, in ns), num_forks, num_irq_total, num_softirq_total and
// collection_end_timestamp. The packet timestamp is when sampling began.
type SysStats struct {
	cfg SysStatsConfig
	// procRoot is "/proc" except in tests.
	procRoot string

	k       *worker // created with the instance; its goroutine starts in Start
	started bool
	stopped bool

	// Used only by the worker goroutine.
	tickMs int64
	ticks  int64
	first  bool
	file   []byte
	msg    []byte
	ent    []byte
	pkt    []byte
	kv     []counterValue
	cpus   []cpuTimes
}

var _ plugins.DataSource = (*SysStats)(nil)

// NewSysStats returns an unstarted instance reading /proc.
func NewSysStats(cfg SysStatsConfig) *SysStats {
	return &SysStats{cfg: cfg, procRoot: "/proc", first: true, k: newWorker(SysStatsName)}
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Start opens the writer and starts the goroutine, which samples every
// enabled file at once and then on its period.
func (s *SysStats) Start(h plugins.Host) error {
	if s.started {
		return fmt.Errorf("%s: %w", SysStatsName, errAlreadyStarted)
	}
	for _, p := range []int64{s.cfg.MeminfoPeriodMs, s.cfg.VmstatPeriodMs, s.cfg.StatPeriodMs} {
		if p > 0 {
			s.tickMs = gcd(s.tickMs, p)
		}
	}
	body := workerBody{}
	if s.tickMs > 0 {
		body.start, body.tick = s.tick, s.tick
		body.period = time.Duration(s.tickMs) * time.Millisecond
	}
	if err := s.k.begin(h, body); err != nil {
		return err
	}
	s.started = true
	return nil
}

// Flush makes the goroutine flush its writer and waits for it.
func (s *SysStats) Flush() error {
	if !s.started || s.stopped {
		return nil
	}
	return s.k.flush()
}

// ClearIncrementalState does nothing: SysStats packets need no
// incremental state.
func (s *SysStats) ClearIncrementalState() {}

// Stop ends the goroutine after it has finished its writer.
func (s *SysStats) Stop() error {
	if !s.started || s.stopped {
		return nil
	}
	s.stopped = true
	return s.k.end()
}

// Stats returns the instance's counters. It may be called at any time,
// from any goroutine.
func (s *SysStats) Stats() Stats {
	var st Stats
	s.k.c.addTo(&st)
	return st
}

func due(period, elapsed int64) bool { return period > 0 && elapsed%period == 0 }

// tick samples the files due at this tick and writes one packet.
func (s *SysStats) tick() {
	elapsed := s.ticks * s.tickMs
	s.ticks++
	start := bootNanos()
	s.msg = s.msg[:0]
	some := false
	if due(s.cfg.MeminfoPeriodMs, elapsed) {
		some = s.sampleCounters("meminfo", ssMeminfo, parseMeminfo) || some
	}
	if due(s.cfg.VmstatPeriodMs, elapsed) {
		some = s.sampleCounters("vmstat", ssVmstat, parseVmstat) || some
	}
	if due(s.cfg.StatPeriodMs, elapsed) {
		some = s.sampleStat() || some
	}
	if !some {
		return
	}
	s.msg = wire.AppendVarint(s.msg, ssCollectionEndTimestamp, bootNanos())
	b := s.pkt[:0]
	b = wire.AppendVarint(b, pktTimestamp, start)
	if s.first {
		s.first = false
		// The general rule for a writer's first packet; these packets
		// need no incremental state, so later ones carry no flags.
		b = wire.AppendVarint(b, pktSequenceFlags, seqIncrementalStateCleared)
		b = wire.AppendVarint(b, pktFirstPacketOnSequence, 1)
	}
	b = wire.AppendBytes(b, pktSysStats, s.msg)
	s.pkt = b
	s.k.c.write(s.k.w, b)
}

func (s *SysStats) readProc(name string) bool {
	b, err := readFileInto(s.file, s.procRoot+"/"+name)
	s.file = b
	if err != nil {
		s.k.c.readErrors.Add(1)
		return false
	}
	return true
}

// sampleCounters appends one {key, value} entry per known counter of
// /proc/<name> as field num.
func (s *SysStats) sampleCounters(name string, num protowire.Number, parse func([]counterValue, []byte) ([]counterValue, int)) bool {
	if !s.readProc(name) {
		return false
	}
	kv, bad := parse(s.kv[:0], s.file)
	s.kv = kv
	s.k.c.readErrors.Add(uint64(bad))
	for _, e := range kv {
		ent := wire.AppendVarint(s.ent[:0], kvKey, uint64(e.Key))
		ent = wire.AppendVarint(ent, kvValue, e.Value)
		s.ent = ent
		s.msg = wire.AppendBytes(s.msg, num, ent)
	}
	return true
}

// sampleStat appends the cpu_stat entries and totals of /proc/stat.
func (s *SysStats) sampleStat() bool {
	if !s.readProc("stat") {
		return false
	}
	st, bad := parseProcStatFile(s.cpus, s.file)
	s.cpus = st.CPUs
	s.k.c.readErrors.Add(uint64(bad))
	for _, c := range st.CPUs {
		e := wire.AppendVarint(s.ent[:0], cpuID, uint64(c.CPU))
		e = wire.AppendVarint(e, cpuUser, c.User*nsPerTick)
		e = wire.AppendVarint(e, cpuUserNice, c.Nice*nsPerTick)
		e = wire.AppendVarint(e, cpuSystem, c.System*nsPerTick)
		e = wire.AppendVarint(e, cpuIdle, c.Idle*nsPerTick)
		e = wire.AppendVarint(e, cpuIoWait, c.IOWait*nsPerTick)
		e = wire.AppendVarint(e, cpuIrq, c.IRQ*nsPerTick)
		e = wire.AppendVarint(e, cpuSoftirq, c.SoftIRQ*nsPerTick)
		e = wire.AppendVarint(e, cpuStealTime, c.Steal*nsPerTick)
		s.ent = e
		s.msg = wire.AppendBytes(s.msg, ssCPUStat, e)
	}
	if st.HasForks {
		s.msg = wire.AppendVarint(s.msg, ssNumForks, st.Forks)
	}
	if st.HasIRQTotal {
		s.msg = wire.AppendVarint(s.msg, ssNumIrqTotal, st.IRQTotal)
	}
	if st.HasSoftIRQTotal {
		s.msg = wire.AppendVarint(s.msg, ssNumSoftirqTotal, st.SoftIRQTotal)
	}
	return true
}
