package main

import (
	"io"
	"sync"
)

// syncWriter serialises writes: a session logs from its sinks' goroutines
// (a relay sink reconnecting, a lane's error) while the command writes its
// status line and summary.
//
// With tty set (stderr is a terminal showing run's status line), every
// line first clears the status line ("\r\x1b[K"), so that a message never
// lands in the middle of it; without, nothing but the text is written:
// control sequences in a log file or a pipe are noise.
type syncWriter struct {
	mu  sync.Mutex
	w   io.Writer
	tty bool
}

// clearLine is the terminal sequence that returns to the start of the line
// and erases it.
const clearLine = "\r\x1b[K"

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tty {
		if _, err := io.WriteString(s.w, clearLine); err != nil {
			return 0, err
		}
	}
	return s.w.Write(p)
}

// status redraws the status line (no newline): on a terminal only.
func (s *syncWriter) status(line string) {
	if !s.tty {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = io.WriteString(s.w, clearLine+line)
}

// clearStatus erases the status line, on a terminal only.
func (s *syncWriter) clearStatus() { s.status("") }
