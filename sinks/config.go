package sinks

import (
	"errors"
	"fmt"
	"time"
)

// SinkTypeFile is the only sink type built so far.
const SinkTypeFile = "file"

// Config describes one sink. Field names in errors are the config keys
// (snake_case) the pipeline's config file uses.
type Config struct {
	Type          string        `koanf:"type"`           // `type`: "file"
	Path          string        `koanf:"path"`           // `path`: first output file (see FileOptions.Path)
	Compression   string        `koanf:"compression"`    // `compression`: "", "none", "gzip", "zstd"
	MaxFileSize   int64         `koanf:"max_file_size"`  // `max_file_size`: bytes per file, 0 = unlimited
	FsyncPeriod   time.Duration `koanf:"fsync_period"`   // `fsync_period`: 0 = 5 s, < 0 = off, else ≥ 100 ms
	Filter        string        `koanf:"filter"`         // `filter`: CEL expression over `packet`, "" = keep all
	QueueCapacity int           `koanf:"queue_capacity"` // `queue_capacity`: batches; 0 = no queue
}

// Validate checks every field and returns all problems joined, each naming
// its field. It does not touch the file system.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("sinks: `%s`: %s", field, fmt.Sprintf(format, args...)))
	}
	switch c.Type {
	case SinkTypeFile:
		if c.Path == "" {
			bad("path", "required for a file sink")
		}
	case "":
		bad("type", "missing; want %q", SinkTypeFile)
	default:
		bad("type", "%q is not a sink type; want %q (relay and nats sinks are not built yet)", c.Type, SinkTypeFile)
	}
	switch c.Compression {
	case "", CompressionNone, CompressionGzip, CompressionZstd:
	default:
		bad("compression", "%q is not supported; want \"none\", \"gzip\" or \"zstd\"", c.Compression)
	}
	if c.MaxFileSize < 0 {
		bad("max_file_size", "%d is negative; want 0 (unlimited) or a byte count", c.MaxFileSize)
	}
	if c.FsyncPeriod > 0 && c.FsyncPeriod < MinFsyncPeriod {
		bad("fsync_period", "%v is below the minimum %v", c.FsyncPeriod, MinFsyncPeriod)
	}
	if c.QueueCapacity < 0 {
		bad("queue_capacity", "%d is negative; want 0 (no queue) or a batch count", c.QueueCapacity)
	}
	if c.Filter != "" {
		if _, err := NewFilter(c.Filter); err != nil {
			bad("filter", "%v", err)
		}
	}
	return errors.Join(errs...)
}

// New validates cfg and builds the sink: the file sink, wrapped by the
// filter (if any), wrapped by the queue (if QueueCapacity > 0). The filter
// sits behind the queue so that evaluating it costs the caller nothing.
func New(cfg Config) (Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var s Sink
	fs, err := NewFile(FileOptions{
		Path:        cfg.Path,
		Compression: cfg.Compression,
		MaxFileSize: cfg.MaxFileSize,
		FsyncPeriod: cfg.FsyncPeriod,
	})
	if err != nil {
		return nil, err
	}
	s = fs
	if cfg.Filter != "" {
		f, err := NewFilter(cfg.Filter)
		if err != nil {
			return nil, fmt.Errorf("sinks: `filter`: %w", err)
		}
		s = Filtered(s, f)
	}
	if cfg.QueueCapacity > 0 {
		s = Queued(s, cfg.QueueCapacity)
	}
	return s, nil
}
