// Package inprocess is the in-process producer transport: a data source
// (plugins.DataSource, built in or registered by the program) running in
// tracepipe's own process on the producer runtime (plugins/producer),
// writing into a private SMB (mapped outside the Go heap). Its commits
// are encoded as CommitData and handed to the session through the Link,
// exactly as a plugin's arrive: the same validation path, only without a
// process boundary.
//
// The session (package pipeline) builds it from a data source's config
// and drives it through transport.Transport. This package must not import
// pipeline, and owns nothing beyond the runtime of one instance.
package inprocess

import (
	"github.com/tracepipe/tracepipe/plugins"
	pruntime "github.com/tracepipe/tracepipe/plugins/producer"
	"github.com/tracepipe/tracepipe/smb"
	"github.com/tracepipe/tracepipe/transport"
)

var _ transport.Transport = (*Source)(nil)

// Config is what an in-process instance needs.
type Config struct {
	DataSource        plugins.DataSource
	SMBSize, PageSize int
	TargetBuffer      uint32 // the target_buffer of its commits
	Policy            smb.BufferExhaustedPolicy
	// OnTriggers receives the triggers the data source activates, from
	// any goroutine.
	OnTriggers func(names []string)
}

// Source is the Transport of a data source running in this process: the
// producer runtime writes into a private SMB, and its CommitData is encoded
// and handed to the session through the Link (the whole transport).
type Source struct {
	rt   *pruntime.Runtime
	ds   plugins.DataSource
	link transport.Link // set by Start, before the data source runs
}

// New builds the instance and its private SMB (the session's to read and to
// close). Nothing runs until Start.
func New(cfg Config) (*Source, *smb.SMB, error) {
	s, err := smb.NewPrivateSMB(cfg.SMBSize, cfg.PageSize)
	if err != nil {
		return nil, nil, err
	}
	src := &Source{ds: cfg.DataSource}
	rt, err := pruntime.New(pruntime.Config{
		SMB: s, TargetBuffer: cfg.TargetBuffer, Policy: cfg.Policy,
		OnCommit: func(cd *smb.CommitData) {
			l := src.link
			l.Deliver(cd.AppendMarshal(l.CommitBuffer()))
		},
		OnTriggers: cfg.OnTriggers,
	}, cfg.DataSource)
	if err != nil {
		return nil, nil, err
	}
	src.rt = rt
	return src, s, nil
}

// DataSource is the data source instance the transport runs.
func (ip *Source) DataSource() plugins.DataSource { return ip.ds }

func (ip *Source) Start(link transport.Link) error {
	ip.link = link
	return ip.rt.Start()
}
func (ip *Source) Flush(flushID uint64, flags plugins.FlushFlags) error {
	return ip.rt.FlushWithFlags(flushID, flags)
}
func (ip *Source) ClearIncrementalState()  { ip.rt.ClearIncrementalState() }
func (ip *Source) Stop() error             { return ip.rt.Stop() }
func (ip *Source) PacketsDropped() uint64  { return ip.rt.PacketsDropped() }
func (ip *Source) Done() <-chan struct{}   { return ip.rt.Done() }
func (ip *Source) Exited() <-chan struct{} { return nil }
func (ip *Source) ExitErr() error          { return nil }
func (ip *Source) Close()                  {}
