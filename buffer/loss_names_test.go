package buffer

import "github.com/tracepipe/tracepipe/internal/loss"

// Short names for the loss bits in this package's tests.
const (
	LossPresent               = loss.Present
	LossReadGap               = loss.ReadGap
	LossChunkCorrupted        = loss.ChunkCorrupted
	LossOrphanContinuation    = loss.OrphanContinuation
	LossReassemblyGap         = loss.ReassemblyGap
	LossReassemblyBrokenChain = loss.ReassemblyBrokenChain
	LossOverwrite             = loss.Overwrite
	LossWriterAbort           = loss.WriterAbort
	LossSMBFull               = loss.SMBFull
)
