package sinks

import "errors"

// ErrNothingToRotate is Rotate's answer when no packet reached the current
// file since it was opened (a ring-buffer session writes its files only
// at stop): the file stays open, and no file without its service packets
// is produced.
var ErrNothingToRotate = errors.New("sinks: file sink: nothing written to the current file yet; not rotated")

// Rotate ends the current file (with its TraceStats) and continues in the
// next one, which starts self-contained like a max_file_size rotation
// (rotation.go): on demand (`tracepipe rotate`, as `lttng rotate`) or on
// a timer (rotate_period). It returns the name of the file it closed.
// Only a sink that keeps the fold of what it wrote can start a file
// self-contained: one opened with FileOptions.Rotatable or MaxFileSize.
func (s *FileSink) Rotate() (closed string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return "", ErrClosed
	case s.opts.Path == StdoutPath:
		return "", errors.New("sinks: file sink: standard output cannot rotate")
	case s.restore == nil:
		return "", errors.New("sinks: file sink: not rotatable (opened without rotate_period or max_file_size)")
	case s.err != nil:
		return "", s.err
	case s.fileBytes <= s.preamble:
		// Closing it would leave a file of a lone TraceStats, without
		// the service packets (clock snapshot, config) that make a
		// trace importable; the packets to come go to this file.
		return "", ErrNothingToRotate
	}
	closed = FileName(s.opts.Path, s.index)
	if err := s.rotateLocked(); err != nil {
		// No file may be open now: the sink fails (and, after a full
		// file system, may resume) rather than buffer into nothing.
		s.setErr(err)
		return closed, err
	}
	return closed, nil
}
