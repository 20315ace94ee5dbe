package pipeline

import (
	"errors"
	"fmt"

	"github.com/tracepipe/tracepipe/sinks"
)

// Rotation on demand (`tracepipe rotate`, like `lttng rotate`) and by time
// (rotate_period, beside max_file_size): every file sink closes its
// current file, which ends with a TraceStats, and continues in the next,
// which starts self-contained (sinks.FileSink.Rotate).

// Rotate rotates every file sink's file now and returns the files it
// closed. Safe for concurrent use. A sink whose current file holds no
// packet yet keeps it (sinks.ErrNothingToRotate): in ring-buffer mode (no
// write_into_file) the buffers are written only at the end, so until then
// no file is closed. When no sink rotated for that reason, the error
// wraps sinks.ErrNothingToRotate.
func (s *Service) Rotate() ([]string, error) {
	var closed []string
	var errs []error
	n, empty := 0, 0
	for _, l := range s.lanes {
		f, ok := l.Sink().(*sinks.FileSink)
		if !ok {
			continue
		}
		n++
		name, err := f.Rotate()
		if errors.Is(err, sinks.ErrNothingToRotate) {
			empty++
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", l.Name(), err))
			continue
		}
		closed = append(closed, name)
	}
	if n == 0 {
		return nil, errors.New("pipeline: the session has no file sink to rotate")
	}
	if empty == n {
		how := ""
		if !s.cfg.WriteIntoFile {
			how = " (write_into_file is false: the ring is written to the files only at stop)"
		}
		return nil, fmt.Errorf("pipeline: no file rotated: no packet has been written to the current file%s: %w", how, sinks.ErrNothingToRotate)
	}
	return closed, errors.Join(errs...)
}

// rotateFiles is rotate_period's timer on the service goroutine. Each
// sink rotates between two of its writes: packets still queued in its
// lane land in the next file.
func (s *Service) rotateFiles() {
	if _, err := s.Rotate(); err != nil && !errors.Is(err, sinks.ErrNothingToRotate) {
		s.logf("rotate_period: %v", err)
	}
}
