package builtin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"syscall"
)

// Parsers for the /proc files the Linux sources read. They work on byte
// slices, never panic on malformed input (fuzzed), and allocate nothing
// beyond what they return.

// procStat is what process_stats needs of /proc/PID/stat.
type procStat struct {
	PID   int64
	Comm  []byte // aliases the input
	State byte
	PPID  int64
	Flags uint64
}

// pfKthread is the PF_KTHREAD bit of the stat flags field.
const pfKthread = 0x00200000

var errMalformed = errors.New("malformed")

// parseProcStat parses a /proc/PID/stat line: "pid (comm) state ppid pgrp
// session tty_nr tpgid flags ...". comm may contain anything, spaces and
// parentheses included, so it ends at the LAST ')'.
func parseProcStat(b []byte) (procStat, error) {
	var st procStat
	open := bytes.IndexByte(b, '(')
	close := bytes.LastIndexByte(b, ')')
	if open < 0 || close < open {
		return st, fmt.Errorf("stat: %w: no (comm)", errMalformed)
	}
	pid, err := strconv.ParseInt(string(bytes.TrimSpace(b[:open])), 10, 64)
	if err != nil {
		return st, fmt.Errorf("stat: %w: pid %q", errMalformed, b[:open])
	}
	st.PID = pid
	st.Comm = b[open+1 : close]
	// Fields after comm, 1-based as in proc(5) minus 2: state, ppid, pgrp,
	// session, tty_nr, tpgid, flags.
	rest := b[close+1:]
	var fields [7][]byte
	for i := range fields {
		f, r, ok := nextField(rest)
		if !ok {
			return st, fmt.Errorf("stat: %w: %d fields after comm, want at least %d", errMalformed, i, len(fields))
		}
		fields[i], rest = f, r
	}
	// The state is one letter (R, S, D, Z, T, t, X, x, K, W, P, I); a
	// ')' there would make the last-')' rule ambiguous.
	if len(fields[0]) != 1 || !('a' <= fields[0][0]|0x20 && fields[0][0]|0x20 <= 'z') {
		return st, fmt.Errorf("stat: %w: state %q", errMalformed, fields[0])
	}
	st.State = fields[0][0]
	if st.PPID, err = strconv.ParseInt(string(fields[1]), 10, 64); err != nil {
		return st, fmt.Errorf("stat: %w: ppid %q", errMalformed, fields[1])
	}
	if st.Flags, err = strconv.ParseUint(string(fields[6]), 10, 64); err != nil {
		return st, fmt.Errorf("stat: %w: flags %q", errMalformed, fields[6])
	}
	return st, nil
}

// nextField returns the next space-separated field of b.
func nextField(b []byte) (field, rest []byte, ok bool) {
	i := 0
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	j := i
	for j < len(b) && !isSpace(b[j]) {
		j++
	}
	if i == j {
		return nil, nil, false
	}
	return b[i:j], b[j:], true
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// parseStatusUID returns the real uid from a /proc/PID/status file (the
// first number of its "Uid:" line).
func parseStatusUID(b []byte) (int64, error) {
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		if v, ok := bytes.CutPrefix(line, []byte("Uid:")); ok {
			f, _, ok := nextField(v)
			if !ok {
				break
			}
			uid, err := strconv.ParseInt(string(f), 10, 64)
			if err != nil || uid < 0 {
				return 0, fmt.Errorf("status: %w: Uid %q", errMalformed, f)
			}
			return uid, nil
		}
	}
	return 0, fmt.Errorf("status: %w: no Uid line", errMalformed)
}

// splitCmdline splits /proc/PID/cmdline (NUL-separated, usually
// NUL-terminated) into its arguments, appending them to dst. An empty file
// (kernel threads, zombies) gives no arguments.
func splitCmdline(dst [][]byte, b []byte) [][]byte {
	b = bytes.TrimSuffix(b, []byte{0})
	if len(b) == 0 {
		return dst
	}
	for {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			return append(dst, b)
		}
		dst = append(dst, b[:i])
		b = b[i+1:]
	}
}

// counterValue is one parsed meminfo or vmstat entry.
type counterValue struct {
	Key   int32 // MeminfoCounters or VmstatCounters enum value
	Value uint64
}

// parseMeminfo parses /proc/meminfo ("Name:   value kB" lines), appending
// the entries whose name has a MeminfoCounters enum to dst in file order.
// Lines that do not parse are skipped and counted in bad.
func parseMeminfo(dst []counterValue, b []byte) (out []counterValue, bad int) {
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			bad++
			continue
		}
		v, rest, ok := nextUint(line[colon+1:])
		if !ok {
			bad++
			continue
		}
		if unit, _, ok := nextField(rest); ok && string(unit) != "kB" {
			bad++
			continue
		}
		if key, ok := meminfoKeys[string(line[:colon])]; ok {
			dst = append(dst, counterValue{Key: key, Value: v})
		}
	}
	return dst, bad
}

// parseVmstat parses /proc/vmstat ("name value" lines), appending the
// entries whose name has a VmstatCounters enum to dst in file order.
func parseVmstat(dst []counterValue, b []byte) (out []counterValue, bad int) {
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		name, rest, ok := nextField(line)
		if !ok {
			continue
		}
		f, rest, ok := nextField(rest)
		if !ok {
			bad++
			continue
		}
		if _, _, extra := nextField(rest); extra {
			bad++
			continue
		}
		// Some counters (e.g. nr_dirty_threshold on some kernels) are
		// signed; keep their two's complement as Perfetto does.
		v, err := strconv.ParseUint(string(f), 10, 64)
		if err != nil {
			n, err2 := strconv.ParseInt(string(f), 10, 64)
			if err2 != nil {
				bad++
				continue
			}
			v = uint64(n)
		}
		if key, ok := vmstatKeys[string(name)]; ok {
			dst = append(dst, counterValue{Key: key, Value: v})
		}
	}
	return dst, bad
}

// cpuTimes is one "cpuN" line of /proc/stat, in USER_HZ ticks.
type cpuTimes struct {
	CPU                                                   uint32
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal uint64
}

// procStatFile is what sys_stats reads from /proc/stat.
type procStatFile struct {
	CPUs                                   []cpuTimes
	Forks, IRQTotal, SoftIRQTotal          uint64
	HasForks, HasIRQTotal, HasSoftIRQTotal bool
}

// userHZ is the unit of /proc/stat's cpu times (USER_HZ, 100 on every
// Linux ABI); nsPerTick converts them to nanoseconds.
const (
	userHZ    = 100
	nsPerTick = 1_000_000_000 / userHZ
)

// parseProcStatFile parses /proc/stat: per-CPU "cpuN" lines (the aggregate
// "cpu" line is skipped), "intr total ...", "softirq total ..." and
// "processes N". cpus is reused for the result's CPUs. Malformed lines are
// skipped and counted in bad.
func parseProcStatFile(cpus []cpuTimes, b []byte) (out procStatFile, bad int) {
	out.CPUs = cpus[:0]
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		name, rest, ok := nextField(line)
		if !ok {
			continue
		}
		switch {
		case string(name) == "cpu":
		case len(name) > 3 && string(name[:3]) == "cpu":
			id, err := strconv.ParseUint(string(name[3:]), 10, 32)
			if err != nil {
				bad++
				continue
			}
			ct := cpuTimes{CPU: uint32(id)}
			// user nice system idle [iowait irq softirq [steal ...]]: old
			// kernels have 4, 7 or 8 columns; missing ones stay 0.
			dsts := [...]*uint64{&ct.User, &ct.Nice, &ct.System, &ct.Idle, &ct.IOWait, &ct.IRQ, &ct.SoftIRQ, &ct.Steal}
			n := 0
			for ; n < len(dsts); n++ {
				f, r, ok := nextField(rest)
				if !ok {
					break
				}
				v, err := strconv.ParseUint(string(f), 10, 64)
				if err != nil {
					n = -1
					break
				}
				*dsts[n], rest = v, r
			}
			if n < 4 {
				bad++
				continue
			}
			out.CPUs = append(out.CPUs, ct)
		case string(name) == "intr" || string(name) == "softirq" || string(name) == "processes":
			v, _, ok := nextUint(rest)
			if !ok {
				bad++
				continue
			}
			switch string(name) {
			case "intr":
				out.IRQTotal, out.HasIRQTotal = v, true
			case "softirq":
				out.SoftIRQTotal, out.HasSoftIRQTotal = v, true
			default:
				out.Forks, out.HasForks = v, true
			}
		}
	}
	return out, bad
}

// isVanished reports whether err means the process or file went away
// (ENOENT, ESRCH): normal while scanning /proc.
func isVanished(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// readFileInto reads the whole file at path into buf (reused, grown as
// needed) and returns the filled slice.
func readFileInto(buf []byte, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return buf[:0], err
	}
	defer f.Close()
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// nextLine splits b at its first newline: the line (without the newline)
// and what follows it (nil after the last line).
func nextLine(b []byte) (line, rest []byte) {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i], b[i+1:]
	}
	return b, nil
}

// nextUint reads the next field of b as a decimal uint64; ok is false
// when there is no field or it is not such a number.
func nextUint(b []byte) (v uint64, rest []byte, ok bool) {
	f, rest, ok := nextField(b)
	if !ok {
		return 0, b, false
	}
	v, err := strconv.ParseUint(string(f), 10, 64)
	return v, rest, err == nil
}
