package tracefile

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ReadFile streams the records of the trace file at path (plain, gzip or
// zstd) to fn, in file order. A truncated trace is read up to its last
// whole packet: ReadFile then calls onTruncated (when not nil) with the
// number of whole records read and the ErrTruncated error, and returns
// nil, so that the caller decides how to word the warning. Errors other
// than opening the file name path; an error from fn ends the read and is
// returned, named by path.
func ReadFile(path string, opts ReaderOptions, onTruncated func(records int, err error), fn func(Record) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	rd, err := NewReaderOptions(f, opts)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer rd.Close()
	for n := 0; ; n++ {
		rec, err := rd.Next()
		switch {
		case err == io.EOF:
			return nil
		case errors.Is(err, ErrTruncated):
			if onTruncated != nil {
				onTruncated(n, err)
			}
			return nil
		case err != nil:
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := fn(rec); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
}

// ReadFilePackets is ReadFile with each record's top-level fields decoded
// (DecodePacket) for fn. A record whose top level does not decode is
// skipped and counted: the count is returned, with ReadFile's error, for
// the caller to word. With ReaderOptions.MaxPacketBuffer, fn sees
// Record.Elided on a longer packet, decoded from what Record.Packet kept.
func ReadFilePackets(path string, opts ReaderOptions, onTruncated func(records int, err error), fn func(Record, *PacketInfo) error) (undecodable int, err error) {
	err = ReadFile(path, opts, onTruncated, func(rec Record) error {
		info, err := DecodePacket(rec.Packet)
		if err != nil {
			undecodable++
			return nil
		}
		return fn(rec, &info)
	})
	return undecodable, err
}
