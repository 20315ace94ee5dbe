package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/tracepipe/tracepipe/tracefile"
)

// readLimits are the memory bounds of the commands that read whole traces
// (inspect): how many sequences get a row of their own, and how much of
// one packet is held.
type readLimits struct {
	maxSequences    int
	maxPacketBuffer int
}

func (l *readLimits) register(fs *pflag.FlagSet) {
	fs.IntVar(&l.maxSequences, "max-sequences", tracefile.DefaultSummarySequences,
		"sequences given a row of their own; the packets of further sequences are added up in one row, and the output says so")
	fs.IntVar(&l.maxPacketBuffer, "max-packet-buffer", tracefile.DefaultMaxPacketBuffer,
		"bytes held of one packet; fields of a longer packet that do not fit are skipped unread, and the output says so")
}

func (l readLimits) validate() error {
	if l.maxSequences < 1 {
		return usageError{fmt.Errorf("--max-sequences must be >= 1, got %d", l.maxSequences)}
	}
	if l.maxPacketBuffer < 1 {
		return usageError{fmt.Errorf("--max-packet-buffer must be >= 1, got %d", l.maxPacketBuffer)}
	}
	return nil
}

func (l readLimits) apply(o *tracefile.SummaryOptions) {
	o.MaxSequences, o.MaxPacketBuffer = l.maxSequences, l.maxPacketBuffer
}
