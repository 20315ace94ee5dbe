package sinks

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/tracefile"
)

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		cfg  Config
		want []string
	}{
		{Config{}, []string{"sinks: `type`: missing; want \"file\""}},
		{Config{Type: "nats"}, []string{"sinks: `type`: \"nats\" is not a sink type"}},
		{Config{Type: "file"}, []string{"sinks: `path`: required for a file sink"}},
		{Config{Type: "file", Path: "x", Compression: "lz4"}, []string{"sinks: `compression`: \"lz4\" is not supported"}},
		{Config{Type: "file", Path: "x", MaxFileSize: -1}, []string{"sinks: `max_file_size`: -1 is negative"}},
		{Config{Type: "file", Path: "x", FsyncPeriod: time.Millisecond}, []string{"sinks: `fsync_period`: 1ms is below the minimum 100ms"}},
		{Config{Type: "file", Path: "x", QueueCapacity: -2}, []string{"sinks: `queue_capacity`: -2 is negative"}},
		{Config{Type: "file", Path: "x", Filter: "packet.nope"}, []string{"sinks: `filter`: sinks: filter \"packet.nope\""}},
		{Config{Type: "file", Compression: "xz", QueueCapacity: -1}, []string{"`path`", "`compression`", "`queue_capacity`"}},
	}
	for _, c := range cases {
		err := c.cfg.Validate()
		if err == nil {
			t.Errorf("%+v validated", c.cfg)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: error %q lacks %q", c.cfg, err, w)
			}
		}
	}
	ok := Config{Type: "file", Path: "x", Compression: "zstd", MaxFileSize: 1 << 20, FsyncPeriod: time.Second, Filter: "true", QueueCapacity: 4}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
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
	if _, ok := s.(*QueuedSink); !ok {
		t.Fatalf("New returned %T, want *QueuedSink", s)
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
	if _, ok := s2.(*FileSink); !ok {
		t.Fatalf("plain config built %T", s2)
	}
	s2.Close(bg)
}
