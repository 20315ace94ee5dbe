package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/tracepipe/tracepipe/protovm"
)

// Limits for the apply command's trace reader.
const (
	protoVMMaxPacket  = 64 << 20 // largest TracePacket accepted
	protoVMDumpDepth  = 16       // nesting depth the state dump decodes
	protoVMDefaultMem = 1 << 20  // default memory limit (bytes)
)

// newProtoVMCmd builds `tracepipe protovm` with `compile` and `apply`.
func newProtoVMCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "protovm",
		Short: "Compile ProtoVM programs and replay traces through them",
	}
	cmd.AddCommand(newProtoVMCompileCmd(), newProtoVMApplyCmd())
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
			var files *protoregistry.Files
			if desc != "" {
				b, err := os.ReadFile(desc)
				if err != nil {
					return err
				}
				f, err := protovm.LoadDescriptorSet(b)
				if err != nil {
					return fmt.Errorf("%s: %w", desc, err)
				}
				files = f
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

func newProtoVMApplyCmd() *cobra.Command {
	var (
		progPath string
		dsName   string
		seq      uint32
		memLimit int
		initPath string
	)
	c := &cobra.Command{
		Use:   "apply --program prog.bin TRACE",
		Short: "Apply the packets of a Perfetto trace file as patches and print the state",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dsName != "" && cmd.Flags().Changed("sequence") {
				return errors.New("--data-source and --sequence are exclusive")
			}
			prog, err := os.ReadFile(progPath)
			if err != nil {
				return err
			}
			var vm *protovm.VM
			if initPath != "" {
				init, err := os.ReadFile(initPath)
				if err != nil {
					return err
				}
				var ok bool
				vm, ok, err = protovm.NewWithState(prog, memLimit, init)
				if err != nil {
					return fmt.Errorf("%s: %w", progPath, err)
				}
				if !ok {
					fmt.Fprintf(cmd.ErrOrStderr(), "initial state does not fit in %d bytes; starting empty\n", memLimit)
				}
			} else if vm, err = protovm.New(prog, memLimit); err != nil {
				return fmt.Errorf("%s: %w", progPath, err)
			}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			filter := packetFilter{dataSource: dsName, seq: seq, bySeq: cmd.Flags().Changed("sequence")}
			out := cmd.OutOrStdout()
			n, err := applyTrace(bufio.NewReader(f), vm, filter, out)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			s := vm.Stats()
			fmt.Fprintf(out, "# patches=%d ok=%d error=%d abort=%d memory_limit_hits=%d memory_usage=%d\n",
				n, s.PatchesApplied, s.PatchesFailed, s.PatchesAborted, s.MemoryLimitHits, vm.MemoryUsage())
			fmt.Fprintln(out, "state {")
			dumpProto(out, vm.SerializeIncrementalState(nil), 1)
			fmt.Fprintln(out, "}")
			return nil
		},
	}
	c.Flags().StringVar(&progPath, "program", "", "VmProgram bytes (from `protovm compile`)")
	c.Flags().StringVar(&dsName, "data-source", "", "only packets of sequences (trusted_packet_sequence_id) that carry this data source's payload field: track_event (11), for_testing (900) or field:N")
	c.Flags().Uint32Var(&seq, "sequence", 0, "only packets with this trusted_packet_sequence_id")
	c.Flags().IntVar(&memLimit, "memory-limit", protoVMDefaultMem, "state memory limit in bytes")
	c.Flags().StringVar(&initPath, "initial-state", "", "file holding an initial serialised state")
	_ = c.MarkFlagRequired("program")
	return c
}

// packetFilter selects which packets are applied.
type packetFilter struct {
	dataSource string
	seq        uint32
	bySeq      bool
	// seqOK remembers, per sequence, whether it belongs to the data source.
	seqOK map[uint32]bool
}

// TracePacket field numbers used by the filter.
const (
	tpTrustedSeqID = 10
	tpForTesting   = 900
	tpTrackEvent   = 11
)

func (f *packetFilter) accept(pkt []byte) bool {
	if !f.bySeq && f.dataSource == "" {
		return true
	}
	seq, _ := packetSeq(pkt)
	if f.bySeq {
		return seq == f.seq
	}
	if f.seqOK == nil {
		f.seqOK = map[uint32]bool{}
	}
	if ok, known := f.seqOK[seq]; known {
		return ok
	}
	// A sequence belongs to the data source when one of its packets carries
	// a top-level field whose name-to-number mapping the user gave, or when
	// the data source is given as a field number ("field:900").
	ok := false
	if num, isNum := strings.CutPrefix(f.dataSource, "field:"); isNum {
		if n, err := strconv.ParseUint(num, 10, 32); err == nil {
			ok = hasTopField(pkt, protowire.Number(n))
		}
	} else if num, known := dataSourceFields[f.dataSource]; known {
		ok = hasTopField(pkt, num)
	}
	if ok {
		f.seqOK[seq] = true
	}
	return ok
}

// dataSourceFields maps well-known data source names to the TracePacket
// field their packets carry.
var dataSourceFields = map[string]protowire.Number{
	"track_event": tpTrackEvent,
	"for_testing": tpForTesting,
}

func packetSeq(pkt []byte) (uint32, bool) {
	for len(pkt) > 0 {
		num, typ, n := protowire.ConsumeTag(pkt)
		if n < 0 {
			return 0, false
		}
		pkt = pkt[n:]
		if num == tpTrustedSeqID && typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(pkt)
			return uint32(v), m > 0
		}
		m := protowire.ConsumeFieldValue(num, typ, pkt)
		if m < 0 {
			return 0, false
		}
		pkt = pkt[m:]
	}
	return 0, false
}

func hasTopField(pkt []byte, want protowire.Number) bool {
	for len(pkt) > 0 {
		num, typ, n := protowire.ConsumeTag(pkt)
		if n < 0 {
			return false
		}
		if num == want {
			return true
		}
		m := protowire.ConsumeFieldValue(num, typ, pkt[n:])
		if m < 0 {
			return false
		}
		pkt = pkt[n+m:]
	}
	return false
}

// applyTrace streams a Trace (repeated field 1 of length-delimited
// TracePackets) from r, applying the accepted packets to vm in order and
// printing the status of each failing patch. It returns the number of
// patches applied.
func applyTrace(r *bufio.Reader, vm *protovm.VM, filter packetFilter, out io.Writer) (int, error) {
	var (
		off  int64
		buf  []byte
		nPkt int
	)
	for {
		start := off
		tag, n, err := readUvarint(r)
		if err == io.EOF && n == 0 {
			return nPkt, nil
		}
		if err != nil {
			return nPkt, fmt.Errorf("byte %d: truncated field tag: %w", start, err)
		}
		off += int64(n)
		num, typ := protowire.Number(tag>>3), protowire.Type(tag&7)
		if num == 0 {
			return nPkt, fmt.Errorf("byte %d: field number 0", start)
		}
		switch typ {
		case protowire.VarintType:
			_, n, err = readUvarint(r)
			off += int64(n)
		case protowire.Fixed32Type:
			_, err = r.Discard(4)
			off += 4
		case protowire.Fixed64Type:
			_, err = r.Discard(8)
			off += 8
		case protowire.BytesType:
			var size uint64
			size, n, err = readUvarint(r)
			off += int64(n)
			if err != nil {
				break
			}
			if size > protoVMMaxPacket {
				return nPkt, fmt.Errorf("byte %d: field %d length %d exceeds %d", start, num, size, protoVMMaxPacket)
			}
			if num != 1 {
				_, err = r.Discard(int(size))
				off += int64(size)
				break
			}
			if cap(buf) < int(size) {
				buf = make([]byte, size)
			}
			buf = buf[:size]
			if _, err = io.ReadFull(r, buf); err != nil {
				break
			}
			off += int64(size)
			if !filter.accept(buf) {
				continue
			}
			st := vm.ApplyPatch(buf)
			if !st.IsOk() {
				fmt.Fprintf(out, "# packet %d at byte %d: %s\n", nPkt, start, st)
			}
			nPkt++
		default:
			return nPkt, fmt.Errorf("byte %d: field %d has unsupported wire type %d", start, num, typ)
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nPkt, fmt.Errorf("byte %d: field %d truncated: %w", start, num, err)
		}
	}
}

func readUvarint(r *bufio.Reader) (uint64, int, error) {
	var v uint64
	for i := 0; i < 10; i++ {
		c, err := r.ReadByte()
		if err != nil {
			if i > 0 && err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, i, err
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1, nil
		}
	}
	return 0, 10, errors.New("varint longer than 10 bytes")
}

// dumpProto prints a generic proto-text rendering by field number.
// Length-delimited fields that are printable text are quoted strings;
// otherwise they are expanded when they parse as messages, else quoted.
func dumpProto(w io.Writer, b []byte, depth int) {
	ind := strings.Repeat("  ", depth)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			fmt.Fprintf(w, "%s# undecodable: %x\n", ind, b)
			return
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			fmt.Fprintf(w, "%s# undecodable field %d: %x\n", ind, num, b)
			return
		}
		switch typ {
		case protowire.VarintType:
			v, _ := protowire.ConsumeVarint(b)
			fmt.Fprintf(w, "%s%d: %d\n", ind, num, v)
		case protowire.Fixed32Type:
			v, _ := protowire.ConsumeFixed32(b)
			fmt.Fprintf(w, "%s%d: 0x%08x\n", ind, num, v)
		case protowire.Fixed64Type:
			v, _ := protowire.ConsumeFixed64(b)
			fmt.Fprintf(w, "%s%d: 0x%016x\n", ind, num, v)
		case protowire.BytesType:
			v, _ := protowire.ConsumeBytes(b)
			if depth < protoVMDumpDepth && len(v) > 0 && !isPrintable(v) && looksLikeMessage(v) {
				fmt.Fprintf(w, "%s%d {\n", ind, num)
				dumpProto(w, v, depth+1)
				fmt.Fprintf(w, "%s}\n", ind)
			} else {
				fmt.Fprintf(w, "%s%d: %q\n", ind, num, v)
			}
		default:
			fmt.Fprintf(w, "%s%d: (group)\n", ind, num)
		}
		b = b[m:]
	}
}

// isPrintable reports whether b reads as text (printable UTF-8).
func isPrintable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

func looksLikeMessage(b []byte) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ == protowire.StartGroupType || typ == protowire.EndGroupType {
			return false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return false
		}
		b = b[n+m:]
	}
	return true
}
