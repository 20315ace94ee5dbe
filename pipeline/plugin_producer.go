package pipeline

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/tracepipe/tracepipe/buffer"
	"github.com/tracepipe/tracepipe/plugins/host"
	"github.com/tracepipe/tracepipe/smb"
)

// pluginSide is the side of a data source served by a plugin process: the
// service creates the SMB as a memfd, the plugin maps it and writes into
// it, and its commits arrive over the plugin's gRPC stream. The plugin is
// untrusted: its commits go through the same validation as anyone's, and
// its trusted pid is the one the service started, not one it reports.
type pluginSide struct {
	cfg    host.Config
	plugin *host.Plugin
}

// newPluginProducer builds a producer whose data source runs in the
// plugin executable path. Nothing is started until Run.
func newPluginProducer(id uint16, index int, name string, target int, path string, config map[string]any,
	smbSize, pageSize int, policy smb.BufferExhaustedPolicy, client buffer.ClientIdentity,
	commits chan<- commitMsg, finished <-chan struct{}, logf func(string, ...any)) (*producer, error) {
	s, err := smb.NewMemfdSMB(fmt.Sprintf("tracepipe-ds%d", index), smbSize, pageSize)
	if err != nil {
		return nil, err
	}
	p := newProducer(id, index, name, target, s, client, commits, finished)
	p.side = &pluginSide{cfg: host.Config{
		Path:             path,
		Name:             name,
		DataSourceConfig: config,
		SMB:              s,
		TargetBuffer:     bufferID(target),
		Policy:           policy,
		OnCommit:         p.deliver,
		Stderr:           &lineLogger{prefix: fmt.Sprintf("data_sources[%d] (%s) plugin: ", index, name), logf: logf},
	}}
	return p, nil
}

func (ps *pluginSide) start(p *producer) error {
	pl, err := host.Launch(context.Background(), ps.cfg)
	if err != nil {
		return err
	}
	ps.plugin = pl
	// The pid the service itself started, whatever the plugin claims.
	p.client.PID = int32(pl.Pid())
	return pl.Start()
}

func (ps *pluginSide) flush(flushID uint64) error { return ps.plugin.Flush(flushID) }

func (ps *pluginSide) clearIncrementalState() { _ = ps.plugin.ClearIncrementalState() }

func (ps *pluginSide) stop() error {
	if ps.plugin == nil {
		return nil
	}
	return ps.plugin.Stop()
}

// tick does nothing: the plugin's SDK pushes its batched commits itself.
func (ps *pluginSide) tick() {}

// packetsDropped is 0: a plugin's own writer counters are not trusted; its
// losses show up in the buffer (trace_writer_packet_loss) and in the
// previous_packet_dropped flags of its sequences.
func (ps *pluginSide) packetsDropped() uint64 { return 0 }

func (ps *pluginSide) done() <-chan struct{} { return nil }

// close ends the plugin process if it is still running.
func (ps *pluginSide) close() {
	if ps.plugin != nil {
		ps.plugin.Kill()
	}
}

// lineLogger turns a plugin's stderr into log lines.
type lineLogger struct {
	mu     sync.Mutex
	prefix string
	logf   func(string, ...any)
	buf    []byte
}

func (l *lineLogger) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, b...)
	for {
		i := strings.IndexByte(string(l.buf), '\n')
		if i < 0 {
			break
		}
		if l.logf != nil {
			l.logf("%s%s", l.prefix, l.buf[:i])
		}
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 4096 { // a line that never ends is logged in pieces
		if l.logf != nil {
			l.logf("%s%s", l.prefix, l.buf)
		}
		l.buf = l.buf[:0]
	}
	return len(b), nil
}
