package main

import (
	"io"
	"sync"
)

// syncWriter serialises writes: a session logs from its sinks' goroutines
// (a relay sink reconnecting, a lane's error) while the command writes its
// status line and summary.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
