package sinks

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/tracefile"
)

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		cfg  Config
		want FieldErrors
	}{
		{Config{}, FieldErrors{{"type", "missing; want one of " + strings.Join(Types(), ", ")}}},
		{Config{Type: "pigeon"}, FieldErrors{{"type", `"pigeon" is not a sink type; registered: ` + strings.Join(Types(), ", ")}}},
		{Config{Type: "file"}, FieldErrors{{"path", "required for a file sink"}}},
		{Config{Type: "file", Path: "x", Compression: "lz4"}, FieldErrors{{"compression", `"lz4" is not supported; want "none", "gzip" or "zstd"`}}},
		{Config{Type: "file", Path: "x", MaxFileSize: -1}, FieldErrors{{"max_file_size", "-1 is negative; want 0 (unlimited) or a byte count >= 1MiB"}}},
		{Config{Type: "file", Path: "x", MaxFileSize: 100}, FieldErrors{{"max_file_size", "100 is below the minimum 1MiB (0 = unlimited)"}}},
		{Config{Type: "file", Path: "x", FsyncPeriod: time.Millisecond}, FieldErrors{{"fsync_period", "1ms is below the minimum 100ms"}}},
		{Config{Type: "file", Path: "x", QueueCapacity: -2}, FieldErrors{{"queue_capacity", "-2 is negative; want 0 (the default, 8) or a batch count"}}},
		{Config{Type: "file", Path: "x.gz", Compression: "zstd"}, FieldErrors{{"compression", `"zstd", but the name "x.gz" implies gzip`}}},
		{Config{Type: "file", Path: "x", WhenFull: "wait", OnError: "panic", FilterError: "maybe"}, FieldErrors{
			{"filter_error", `"maybe" is not keep or drop`}, {"when_full", `"wait" is not block or drop`}, {"on_error", `"panic" is not stop or drop`}}},
		// A section: its problems are prefixed with the type.
		{Config{Type: "file", Sections: map[string]map[string]any{"file": {"compression": "xz", "extra": 1}}}, FieldErrors{
			{"file.path", "required for a file sink"}, {"file.compression", `"xz" is not supported; want "none", "gzip" or "zstd"`}, {"file.extra", "unknown key"}}},
		{Config{Type: "file", Path: "a", Sections: map[string]map[string]any{"file": {"path": "b"}}}, FieldErrors{
			{"path", "set both here and as file.path; keep one"}}},
	}
	for _, c := range cases {
		err := c.cfg.Validate()
		var got FieldErrors
		if !errors.As(err, &got) {
			t.Errorf("%+v: error %v is not FieldErrors", c.cfg, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%+v:\n got %q\nwant %q", c.cfg, got, c.want)
		}
	}
	filterErr := Config{Type: "file", Path: "x", Filter: "packet.nope"}.Validate()
	var fe FieldErrors
	if !errors.As(filterErr, &fe) || len(fe) != 1 || fe[0].Path != "filter" || !strings.Contains(fe[0].Message, "undefined field 'nope'") {
		t.Errorf("bad filter: %v", filterErr)
	}
	ok := Config{Type: "file", Path: "x.zst", Compression: "zstd", MaxFileSize: 1 << 20, FsyncPeriod: time.Second, Filter: "true", QueueCapacity: 4}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	sec := Config{Type: "file", Sections: map[string]map[string]any{"file": {"path": "x.zst", "max_file_size": "2MiB", "fsync_period": "1s"}}}
	b, err := sec.Build()
	if err != nil {
		t.Fatal(err)
	}
	if o := b.(*fileBuilder).opts; o.Compression != CompressionZstd || o.MaxFileSize != 2<<20 || o.FsyncPeriod != time.Second {
		t.Errorf("section decoded as %+v", o)
	}
}

// TestNewEndToEnd builds file+filter+queue from a Config, writes through
// it and reads the result back with the tracefile reader.
func TestNewEndToEnd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "e2e.pftrace.zst")
	s, err := New(Config{Type: "file", Path: path, Compression: "zstd", Filter: `packet.kind != "sys_stats"`, QueueCapacity: 64, FsyncPeriod: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.(*Lane); !ok {
		t.Fatalf("New returned %T, want *Lane", s)
	}
	var want [][]byte
	for i := 0; i < 20; i++ {
		te := mkPacket(2, uint64(i), tracefile.FieldTrackEvent, 20)
		ss := mkPacket(3, uint64(i), tracefile.FieldSysStats, 20)
		want = append(want, te)
		if err := s.Write(bg, [][]byte{te, ss}); err != nil {
			t.Fatal(err)
		}
	}
	ts := tracefile.TraceStats{BufferStats: []tracefile.BufferStats{{ChunksOverwritten: 2}}}
	stats := tracefile.AppendTraceStatsPacket(nil, &ts, 0, 99)
	want = append(want, stats)
	s.Write(bg, [][]byte{stats})
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	samePackets(t, mustRead(t, path), want)
	st := s.Stats()
	if st.PacketsWritten != 21 || st.PacketsFiltered != 20 || st.PacketsDroppedQueue+st.PacketsDroppedError != 0 {
		t.Fatalf("stats %+v", st)
	}
	s2, err := New(Config{Type: "file", Path: filepath.Join(t.TempDir(), "plain")})
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := s2.(*Lane); !ok || !l.Blocks() || l.Capacity() != DefaultFileQueueCapacity {
		t.Fatalf("plain config built %T", s2)
	}
	s2.Close(bg)
}

// A bare 0 for a sink's duration key is accepted (0 in every unit, the
// key's default); any other bare number still names the key.
func TestSectionDurationBareZero(t *testing.T) {
	for _, v := range []any{0, int64(0), uint64(0), float64(0)} {
		sec := NewSection(map[string]any{"ack_timeout": v})
		if d := sec.Duration("ack_timeout", 0); d != 0 || sec.Err() != nil {
			t.Errorf("%T 0: %v, %v", v, d, sec.Err())
		}
	}
	sec := NewSection(map[string]any{"ack_timeout": 10})
	sec.Duration("ack_timeout", 0)
	if err := sec.Err(); err == nil || !strings.Contains(err.Error(), `ack_timeout: want a duration like "10s", got 10`) {
		t.Errorf("bare 10: %v", err)
	}
}

// EffectiveSection fills a file section's defaults, keeps what was
// written, and leaves a section with a problem as it was (a default must
// not replace a mistyped value).
func TestEffectiveSection(t *testing.T) {
	eff, ok := EffectiveSection(SinkTypeFile, map[string]any{"path": "t.pftrace"})
	if !ok || eff["path"] != "t.pftrace" || eff["fsync_period"] != DefaultFsyncPeriod.String() || eff["buffer_size"] != int64(DefaultFileBufferSize) {
		t.Errorf("effective file section: %v %v", eff, ok)
	}
	bad := map[string]any{"path": "t.pftrace", "fsync_period": "soon"}
	if eff, ok := EffectiveSection(SinkTypeFile, bad); ok || eff["fsync_period"] != "soon" {
		t.Errorf("a section with a problem came back as %v %v", eff, ok)
	}
	if _, ok := EffectiveSection("nosuch", nil); ok {
		t.Error("an unknown type has an effective section")
	}
}
