package sinks

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// MinMaxFileSize is the smallest max_file_size a config accepts (0 means
// no cap): smaller files would be mostly the service packets each rotated
// file starts with.
const MinMaxFileSize = 1 << 20

func init() { Register(SinkTypeFile, fileFactory) }

// fileBuilder is a decoded `file` section.
type fileBuilder struct{ opts FileOptions }

// fileFactory decodes the file section:
//
//	path           required; "-" streams to standard output
//	compression    none | gzip | zstd; default from the name (.gz, .zst)
//	max_file_size  bytes on disk per file (compressed bytes when
//	               compressed); 0 = no cap, else >= 1 MiB
//	fsync_period   default 5s; < 0 off; else >= 100ms
//	buffer_size    record buffer in bytes (default 256 KiB)
//	disk_full_retry_max
//	               with on_error: drop, the longest wait between attempts
//	               to resume after a full file system (resume.go); default
//	               30s; < 0 never; else >= 100ms
func fileFactory(m map[string]any) (Builder, error) {
	sec := NewSection(m)
	o := FileOptions{
		Path:        sec.String("path", ""),
		Compression: sec.String("compression", ""),
		MaxFileSize: sec.ByteSize("max_file_size", 0),
		FsyncPeriod: sec.Duration("fsync_period", DefaultFsyncPeriod),
		BufferSize:  int(sec.ByteSize("buffer_size", DefaultFileBufferSize)),
		ResumeMax:   sec.Duration("disk_full_retry_max", DefaultResumeMax),
	}
	if o.Path == "" && !sec.Has("path") {
		sec.Bad("path", "required for a file sink")
	}
	implied := compressionOf(o.Path)
	switch o.Compression {
	case "":
		o.Compression = implied
	case CompressionNone, CompressionGzip, CompressionZstd:
		// The name and the bytes never disagree: a .pftrace name holding
		// zstd opens nowhere by its name.
		switch {
		case implied != CompressionNone && implied != o.Compression:
			sec.Bad("compression", "%q, but the name %q implies %s", o.Compression, filepath.Base(o.Path), implied)
		case implied == CompressionNone && o.Compression != CompressionNone && o.Path != StdoutPath:
			sec.Bad("compression", "%q, but the name %q says uncompressed: name it %s%s, or set compression to none", o.Compression, filepath.Base(o.Path), filepath.Base(o.Path), compressionExt[o.Compression])
		}
	default:
		sec.Bad("compression", "%q is not supported; want \"none\", \"gzip\" or \"zstd\"", o.Compression)
	}
	switch {
	case o.MaxFileSize < 0:
		sec.Bad("max_file_size", "%d is negative; want 0 (unlimited) or a byte count >= 1MiB", o.MaxFileSize)
	case o.MaxFileSize > 0 && o.MaxFileSize < MinMaxFileSize:
		sec.Bad("max_file_size", "%d is below the minimum 1MiB (0 = unlimited)", o.MaxFileSize)
	}
	if o.MaxFileSize > 0 && o.Path == StdoutPath {
		sec.Bad("max_file_size", "standard output (path \"-\") cannot rotate")
	}
	if o.FsyncPeriod > 0 && o.FsyncPeriod < MinFsyncPeriod {
		sec.Bad("fsync_period", "%v is below the minimum %v", o.FsyncPeriod, MinFsyncPeriod)
	}
	if o.ResumeMax > 0 && o.ResumeMax < MinResumeMax {
		sec.Bad("disk_full_retry_max", "%v is below the minimum %v (negative: never resume)", o.ResumeMax, MinResumeMax)
	}
	if o.BufferSize < 0 {
		sec.Bad("buffer_size", "%d is negative", o.BufferSize)
	}
	if err := sec.Err(); err != nil {
		return nil, err
	}
	return &fileBuilder{opts: o}, nil
}

// compressionOf is the compression a file name implies.
// compressionExt is the name extension each compression implies.
var compressionExt = map[string]string{CompressionGzip: ".gz", CompressionZstd: ".zst"}

func compressionOf(path string) string {
	switch {
	case strings.HasSuffix(path, ".gz"):
		return CompressionGzip
	case strings.HasSuffix(path, ".zst"):
		return CompressionZstd
	}
	return CompressionNone
}

func (b *fileBuilder) Destination() string {
	if b.opts.Path == StdoutPath {
		return "standard output"
	}
	return b.opts.Path
}

// Open expands the path's placeholders, creates its directory and the
// first file.
// A name with {timestamp} that is taken gets the next collision-free
// suffix (ExpandName); any other existing file is an error: a sink never
// overwrites.
func (b *fileBuilder) Open(env Env) (Sink, error) {
	o := b.opts
	o.Rotatable = o.Rotatable || env.Rotatable
	o.Logger = env.Logger
	switch {
	case !env.KeepGoing || o.ResumeMax < 0: // on_error: stop ends the session instead
		o.ResumeMax = 0
	case o.ResumeMax == 0:
		o.ResumeMax = DefaultResumeMax
	}
	if o.Path == StdoutPath {
		return NewFile(o)
	}
	for attempt := 0; ; attempt++ {
		o.Path = env.expandN(b.opts.Path, attempt)
		if dir := filepath.Dir(o.Path); dir != "" {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, err
			}
		}
		s, err := NewFile(o)
		if err != nil && errors.Is(err, fs.ErrExist) && strings.Contains(b.opts.Path, "{timestamp}") && attempt < 1000 {
			continue
		}
		return s, err
	}
}

// fsyncOrDefault resolves FileOptions.FsyncPeriod.
func fsyncOrDefault(p time.Duration) time.Duration {
	if p == 0 {
		return DefaultFsyncPeriod
	}
	if p > 0 && p < MinFsyncPeriod {
		return MinFsyncPeriod
	}
	return p
}
