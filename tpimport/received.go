package tpimport

import (
	"fmt"

	"github.com/tracepipe/tracepipe/tracefile"
)

// Finding codes for what a receiver (`tracepipe serve`) wrote into a trace
// it stored: batches of a sender session it never got or would not
// store. trace_processor has no stat for them (they are tracepipe's own
// counters), but the packets of those batches are not in the trace.
const (
	CodeReceivedBatchesMissing = "received_batches_missing"
	CodeReceivedBatchesRefused = "received_batches_refused"
)

// receiverSection records the latest receiver section of a machine's
// session (the counters are cumulative, so the last one stands).
func (c *Checker) receiverSection(r *tracefile.ReceiverStats, machine uint32) {
	for _, x := range []struct {
		code string
		n    uint64
		what string
	}{
		{CodeReceivedBatchesMissing, r.BatchesMissing, "never received"},
		{CodeReceivedBatchesRefused, r.BatchesRefused, "refused by a limit"},
	} {
		if x.n == 0 {
			continue
		}
		msg := fmt.Sprintf("tracepipe serve wrote that %d batch(es) of session %s of %s were %s", x.n, r.SessionString(), r.Hostname, x.what)
		if g := r.GapText(); g != "" && x.code == CodeReceivedBatchesMissing {
			msg += " (" + g + ")"
		}
		c.findings[findingKey{x.code, seqKey{machine, 0}, -1}] = &Finding{
			Code: x.code, Severity: SeverityCheck, Machine: machine, Index: -1,
			Count: int64(x.n), Offset: -1, Message: msg + ": their packets are not in the trace",
		}
	}
}
