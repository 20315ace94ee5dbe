package pipeline

import (
	"github.com/tracepipe/tracepipe/transport"
)

// Transport is the producer-transport contract (package transport, where
// its lifecycle is written down); Link and Sequenced go with it.
type (
	Transport = transport.Transport
	Link      = transport.Link
	Sequenced = transport.Sequenced
)

// The session's side of a Link is the producer itself.
var _ Link = (*producer)(nil)

func (p *producer) SetPID(pid int32)     { p.pid.Store(pid) }
func (p *producer) Deliver(data []byte)  { p.deliver(data) }
func (p *producer) CommitBuffer() []byte { return p.commitBuffer() }
