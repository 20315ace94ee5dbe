package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/tracepipe/tracepipe/protovm"
	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/tracefile"
)

// Limits of the protovm commands.
const (
	protoVMDefaultMem = 1 << 20 // default memory limit (bytes)
	protoVMDumpMax    = 1 << 24 // characters of a state dump
)

// newProtoVMCmd builds `tracepipe protovm` with `compile`, `apply` and
// `eval`.
func newProtoVMCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "protovm",
		Short: "Compile ProtoVM programs and replay traces through them",
	}
	cmd.AddCommand(newProtoVMCompileCmd(), newProtoVMApplyCmd(), newProtoVMEvalCmd())
	return cmd
}

func newProtoVMCompileCmd() *cobra.Command {
	var in, desc, out string
	c := &cobra.Command{
		Use:   "compile -i prog.yaml [-d descriptors.pb] -o prog.bin",
		Short: "Compile a YAML program description into VmProgram bytes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			src, err := os.ReadFile(in)
			if err != nil {
				return err
			}
			files, err := loadDescriptors(desc)
			if err != nil {
				return err
			}
			prog, err := protovm.Compile(src, files)
			if err != nil {
				return fmt.Errorf("%s: %w", in, err)
			}
			if out == "" || out == "-" {
				_, err = cmd.OutOrStdout().Write(prog)
				return err
			}
			return os.WriteFile(out, prog, 0o644)
		},
	}
	c.Flags().StringVarP(&in, "input", "i", "", "YAML program description")
	c.Flags().StringVarP(&desc, "descriptors", "d", "", "binary FileDescriptorSet resolving field names")
	c.Flags().StringVarP(&out, "output", "o", "", "output file for the VmProgram bytes (default stdout)")
	_ = c.MarkFlagRequired("input")
	return c
}

func loadDescriptors(path string) (*protoregistry.Files, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := protovm.LoadDescriptorSet(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// loadProgram reads a program: a description (.yaml, .yml) is compiled,
// anything else is taken as compiled VmProgram bytes and validated.
func loadProgram(path string, files *protoregistry.Files) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		if b, err = protovm.Compile(b, files); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	default:
		if _, err := protovm.ParseProgram(b); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return b, nil
}

type applyOptions struct {
	program, descriptors, initial string
	memLimit, every               int
	maxPacketBuffer               int
	statuses                      bool
	sel                           tracefile.PacketSelector
}

const applyLong = `Apply the packets of a trace (plain, gzip or zstd) to a ProtoVM program as
patches, in file order, and print the final state as text.

The program is a description (.yaml, .yml; compiled as by 'protovm compile')
or compiled VmProgram bytes. Packets can be selected by sequence, by data
source (every packet of the sequences that carry its payload field) or by a
CEL filter on the packet (the file sink's filter language, see docs/sinks.md).

Aborted patches are listed as they happen (--statuses lists errors too);
--every N prints the state after every N patches. A truncated trace is
applied up to its last whole packet, with a warning on stderr.`

func newProtoVMApplyCmd() *cobra.Command {
	var (
		o      applyOptions
		filter string
	)
	c := &cobra.Command{
		Use:   "apply --program PROG TRACE",
		Short: "Apply the packets of a Perfetto trace file as patches and print the state",
		Long:  applyLong,
		Example: `  tracepipe protovm apply --program configs/protovm/interned_names.yaml --data-source track_event out/ring.pftrace.gz
  tracepipe protovm apply --program prog.bin --filter 'packet.sequence_id == 3' --every 1000 trace.pftrace`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.sel.DataSource != "" && cmd.Flags().Changed("sequence") {
				return usageError{errors.New("--data-source and --sequence are exclusive")}
			}
			if o.every < 0 {
				return usageError{fmt.Errorf("--every must be >= 0, got %d", o.every)}
			}
			if o.maxPacketBuffer < 1 {
				return usageError{fmt.Errorf("--max-packet-buffer must be >= 1, got %d", o.maxPacketBuffer)}
			}
			o.sel.BySequence = cmd.Flags().Changed("sequence")
			if filter != "" {
				f, err := sinks.NewFilter(filter)
				if err != nil {
					return usageError{err}
				}
				o.sel.Filter = f.Eval
			}
			return runApply(args[0], o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	c.Flags().StringVar(&o.program, "program", "", "program: a description (.yaml, .yml) or compiled VmProgram bytes")
	c.Flags().StringVarP(&o.descriptors, "descriptors", "d", "", "binary FileDescriptorSet for a description's field names")
	c.Flags().StringVar(&o.sel.DataSource, "data-source", "", "only packets of sequences (trusted_packet_sequence_id) that carry this data source's payload field: track_event (11), for_testing (900) or field:N")
	c.Flags().Uint32Var(&o.sel.Sequence, "sequence", 0, "only packets with this trusted_packet_sequence_id")
	c.Flags().StringVar(&filter, "filter", "", "only packets for which this CEL expression (sinks' filter language) is true")
	c.Flags().IntVar(&o.memLimit, "memory-limit", protoVMDefaultMem, "state memory limit in bytes")
	c.Flags().IntVar(&o.maxPacketBuffer, "max-packet-buffer", tracefile.DefaultMaxPacketBuffer, "bytes held of one packet; a selected packet longer than this stops apply with an error, others are skipped unread")
	c.Flags().StringVar(&o.initial, "initial-state", "", "file holding an initial serialised state")
	c.Flags().IntVar(&o.every, "every", 0, "print the state after every N patches (0: only the final state)")
	c.Flags().BoolVar(&o.statuses, "statuses", false, "list every patch that does not return Ok (default: aborts only)")
	_ = c.MarkFlagRequired("program")
	return c
}

func runApply(path string, o applyOptions, out, stderr io.Writer) error {
	files, err := loadDescriptors(o.descriptors)
	if err != nil {
		return err
	}
	prog, err := loadProgram(o.program, files)
	if err != nil {
		return err
	}
	var vm *protovm.VM
	if o.initial != "" {
		init, err := os.ReadFile(o.initial)
		if err != nil {
			return err
		}
		var ok bool
		if vm, ok, err = protovm.NewWithState(prog, o.memLimit, init); err != nil {
			return fmt.Errorf("%s: %w", o.program, err)
		}
		if !ok {
			fmt.Fprintf(stderr, "tracepipe: warning: initial state does not fit in %d bytes; starting empty\n", o.memLimit)
		}
	} else if vm, err = protovm.New(prog, o.memLimit); err != nil {
		return fmt.Errorf("%s: %w", o.program, err)
	}
	n := 0
	err = readTrace(path, o.maxPacketBuffer, stderr, func(rec tracefile.Record, info *tracefile.PacketInfo) error {
		if !o.sel.Accept(info) {
			return nil // a packet not applied is never held whole
		}
		if rec.Elided > 0 {
			return fmt.Errorf("packet at offset %d is %d bytes, longer than the %d-byte packet buffer: raise --max-packet-buffer to apply it", rec.Offset, rec.Size, o.maxPacketBuffer)
		}
		st := vm.ApplyPatch(rec.Packet)
		n++
		if st.Code == protovm.Abort || o.statuses && !st.IsOk() {
			fmt.Fprintf(out, "# patch %d (packet at offset %d): %s\n", n, rec.Offset, st)
		}
		if o.every > 0 && n%o.every == 0 {
			fmt.Fprintf(out, "# state after patch %d (packet at offset %d):\n", n, rec.Offset)
			writeState(out, vm)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s := vm.Stats()
	fmt.Fprintf(out, "# patches=%d ok=%d error=%d abort=%d memory_limit_hits=%d memory_usage=%d\n",
		n, s.PatchesApplied, s.PatchesFailed, s.PatchesAborted, s.MemoryLimitHits, vm.MemoryUsage())
	writeState(out, vm)
	return nil
}

// writeState prints the VM state as `state { ... }`, fields by name at the
// top (the state is a TracePacket) and by number below.
func writeState(w io.Writer, vm *protovm.VM) {
	fmt.Fprintln(w, "state {")
	text := tracefile.DumpPacketLimit(vm.SerializeIncrementalState(nil), protoVMDumpMax)
	for line := range strings.Lines(text) {
		fmt.Fprint(w, "  "+line)
	}
	fmt.Fprintln(w, "}")
}

// readTrace streams the packets of the trace at path (plain, gzip or zstd)
// to fn with their decoded top-level fields (tracefile.ReadFilePackets),
// wording its warnings on stderr: a truncated trace is read up to its last
// whole packet, and packets whose top level does not decode are skipped
// and counted. At most maxPacketBuffer bytes of a packet are held (0:
// packets are read whole); fn sees Record.Elided on a longer one.
func readTrace(path string, maxPacketBuffer int, stderr io.Writer, fn func(tracefile.Record, *tracefile.PacketInfo) error) error {
	bad, err := tracefile.ReadFilePackets(path, tracefile.ReaderOptions{MaxPacketBuffer: maxPacketBuffer}, truncatedWarning(path, stderr), fn)
	if bad > 0 {
		fmt.Fprintf(stderr, "tracepipe: warning: %s: %d packet(s) could not be decoded and were skipped\n", path, bad)
	}
	return err
}

// truncatedWarning returns the warning tracefile.ReadFile gives a
// truncated trace at path.
func truncatedWarning(path string, stderr io.Writer) func(int, error) {
	return func(n int, err error) {
		fmt.Fprintf(stderr, "tracepipe: warning: %s is truncated (%v); read the %d whole packet(s) before it\n", path, err, n)
	}
}
