package sinks

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"golang.org/x/sys/unix"
)

// A file sink whose file system fills up (ENOSPC, EDQUOT) stops taking
// packets and counts them as dropped (file.go). With on_error: drop
// (FileOptions.ResumeMax > 0) that is an outage, not the end: the sink
// tries again, first after a second, then at doubling intervals up to
// ResumeMax, on its next Write (or Flush, or the final TraceStats), and
// resumes once there is room again.
//
// It resumes in a new file rather than where the old one stopped:
//   - the old file is already a whole trace: it ends at its last complete
//     packet (the reserve kept the failing write from starting, or the
//     file was cut back to that packet's end), and now gets its TraceStats
//     recording the loss so far, as a rotated file does; a compressed
//     stream, which cannot go on after a failed write, gets its proper end
//     this way;
//   - the sequences lost packets in the gap, among them perhaps the
//     interned data that later packets refer to. The new file starts like
//     a rotated one, self-contained (rotation.go): service packets, then
//     each sequence's state folded from every packet the sink was given,
//     the dropped ones included, so trace_processor resolves what follows;
//   - right after that preamble a TraceStats packet records the gap (the
//     sink's sink_packets_dropped so far, sink_reconnects counting the
//     resume), so that `tracepipe stats` and `check` name the loss even in
//     a file that a kill cuts short before its final TraceStats.
//
// An attempt first makes sure of the room: it allocates the reserve past
// the end of the current file before ending it, so a disk still full
// leaves the files as they are; a new file that could not take its
// preamble is started over, never followed by another, so attempts on a
// full disk make no more files.

// DefaultResumeMax is the longest interval between two attempts to resume
// after a full file system (file.disk_full_retry_max).
const DefaultResumeMax = 30 * time.Second

// MinResumeMax is the shortest disk_full_retry_max a config accepts.
const MinResumeMax = 100 * time.Millisecond

// firstResume is the wait before the first attempt (at most ResumeMax).
const firstResume = time.Second

// outage is a file sink's time without room on its file system.
type outage struct {
	on    bool
	since time.Time
	lost  uint64        // PacketsDroppedError when it began
	wait  time.Duration // from the last attempt (or the failure) to the next
	next  time.Time     // the next attempt is due then
}

// isNoRoom reports whether err says the file system is full.
func isNoRoom(err error) bool { return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) }

func (s *FileSink) now() time.Time {
	if s.hooks.now != nil {
		return s.hooks.now()
	}
	return time.Now()
}

// resumeNote completes a full file system's error message.
func (s *FileSink) resumeNote() string {
	if s.opts.ResumeMax <= 0 {
		return ""
	}
	return fmt.Sprintf("; it counts what it drops and tries again, at most every %v (on_error: drop)", s.opts.ResumeMax)
}

// outageBegins starts the clock of attempts after a full file system.
func (s *FileSink) outageBegins() {
	if s.gap.on || s.opts.ResumeMax <= 0 {
		return
	}
	now := s.now()
	s.gap = outage{on: true, since: now, lost: s.stats.PacketsDroppedError, wait: min(firstResume, s.opts.ResumeMax)}
	s.gap.next = now.Add(s.gap.wait)
}

// canResume reports whether the sink's failure is a full file system it
// may recover from.
func (s *FileSink) canResume() bool {
	return s.noRoom && s.opts.ResumeMax > 0 && s.restore != nil && !s.closed
}

// resumeDue makes an attempt if one is due, and reports whether the sink
// takes packets again.
func (s *FileSink) resumeDue() bool {
	if !s.canResume() || s.now().Before(s.gap.next) {
		return false
	}
	return s.resumeLocked()
}

// resumeLocked makes one attempt to resume (see above) and reports
// whether it did. REQUIRES: canResume.
func (s *FileSink) resumeLocked() bool {
	now := s.now()
	s.gap.wait = min(2*s.gap.wait, s.opts.ResumeMax)
	s.gap.next = now.Add(s.gap.wait)
	if s.f != nil && !s.fresh && !s.broken && !s.reserveOff {
		if s.allocate(s.disk, ReserveSize) != nil {
			return false // still full: the file stays as it is
		}
		s.reservedTo = max(s.reservedTo, s.disk+ReserveSize)
	}
	ended := FileName(s.opts.Path, s.index)
	s.err, s.noRoom = nil, false
	s.internal = true
	// The sink's own packets (a trailer, a preamble) that do not reach a
	// file are not packets it was given: a failed attempt counts none of
	// them as written or dropped.
	saved := s.stats
	var err error
	switch {
	case s.f == nil: // its creation failed: create it again
		ended = "" // the one before ended with its TraceStats
		err = s.open()
	case s.fresh: // nothing but (part of) its preamble: start it over
		ended = ""
		if err = s.emptyFile(); err == nil {
			err = s.startFile()
		}
	default: // end it with its TraceStats, go on in the next one
		if err = s.endFileLocked(!s.broken); err == nil {
			saved = s.stats // the trailer is in the old file
			err = s.open()
		}
	}
	if err == nil && s.err == nil {
		s.writePreamble()
		st := s.stats
		st.Reconnects++
		if s.extra != nil {
			st = st.Add(s.extra())
		}
		s.scratch = s.restore.trailer(s.scratch[:0], st)
		s.writeLocked(s.scratch)
		if s.err == nil {
			_ = s.flushLocked(true) // learn now whether it fits
		}
	}
	s.internal = false
	if err == nil && s.err == nil {
		s.stats.Reconnects++
		s.gap.on = false
		lost := s.stats.PacketsDroppedError - s.gap.lost
		where := FileName(s.opts.Path, s.index)
		if ended != "" {
			where += " (" + ended + " ends with a TraceStats counting them)"
		}
		Logf(s.opts.Logger, slog.LevelWarn, "sinks: file sink: room again on the file system after %.1f s: writing %s; %d packets were lost meanwhile (sink_packets_dropped)",
			now.Sub(s.gap.since).Seconds(), where, lost)
		return true
	}
	if s.err == nil {
		s.setErr(err)
	}
	s.stats.PacketsWritten, s.stats.BytesWritten = saved.PacketsWritten, saved.BytesWritten
	s.stats.PacketsDroppedError, s.stats.BytesDroppedError = saved.PacketsDroppedError, saved.BytesDroppedError
	if s.f != nil && s.fresh && !errors.Is(err, errNotEmptied) {
		_ = s.emptyFile() // nothing in it counts; the next attempt starts it over
	}
	return false
}

var errNotEmptied = errors.New("sinks: file sink: cannot empty the new file")

// emptyFile cuts the current file to nothing.
func (s *FileSink) emptyFile() error {
	if s.f.Truncate(0) != nil {
		return errNotEmptied
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return errNotEmptied
	}
	s.disk, s.good, s.reservedTo = 0, 0, 0
	return nil
}

// loseLocked counts packets the sink cannot write. While it may resume,
// their incremental state is folded all the same: the file it resumes in
// restores it (see above).
func (s *FileSink) loseLocked(packets [][]byte) {
	s.dropLocked(packets)
	if s.internal || !s.canResume() {
		return
	}
	for _, p := range packets {
		s.restore.observe(p)
	}
	s.stats.RestoreOverflows = s.restore.overflows
}

// loseOne is loseLocked of one packet.
func (s *FileSink) loseOne(p []byte) {
	s.one[0] = p
	s.loseLocked(s.one[:])
	s.one[0] = nil
}
