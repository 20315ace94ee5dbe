package buffer

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// Feeds the chunks and patches Perfetto's producer wrote (golden/perfetto-smb)
// through the buffer, the way the service's CommitData handler does, and
// checks the packets read back against packets.txt.

type smbChunk struct {
	writer  uint16
	id      uint32
	count   uint16
	flags   uint8
	state   uint32
	payload []byte
}

// smbChunkAt decodes chunk (page, idx) of an SMB image with 4 KiB pages.
func smbChunkAt(t *testing.T, smb []byte, page, idx uint64) smbChunk {
	const pageSize = 4096
	if (page+1)*pageSize > uint64(len(smb)) {
		t.Fatalf("page %d out of range", page)
	}
	p := smb[page*pageSize : (page+1)*pageSize]
	bitmap := binary.LittleEndian.Uint32(p)
	perPage := map[uint32]uint64{1: 1, 2: 2, 3: 4, 4: 7, 5: 14}[(bitmap>>28)&7]
	if idx >= perPage {
		t.Fatalf("page %d (bitmap %#x) has %d chunks, chunk %d requested", page, bitmap, perPage, idx)
	}
	size := (pageSize - 8) / perPage &^ 3
	c := p[8+idx*size : 8+(idx+1)*size]
	packets := binary.LittleEndian.Uint16(c[6:])
	return smbChunk{
		writer:  binary.LittleEndian.Uint16(c[4:]),
		id:      binary.LittleEndian.Uint32(c),
		count:   packets & 0x3ff,
		flags:   uint8(packets >> 10),
		state:   (bitmap >> (2 * idx)) & 3,
		payload: c[8:],
	}
}

// protoFields splits a message into (field number, value bytes or varint).
func protoFields(t *testing.T, m []byte, fn func(num protowire.Number, v uint64, b []byte)) {
	for len(m) > 0 {
		num, typ, n := protowire.ConsumeTag(m)
		if n < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(n))
		}
		m = m[n:]
		switch typ {
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(m)
			if n < 0 {
				t.Fatalf("bad varint in field %d", num)
			}
			fn(num, v, nil)
			m = m[n:]
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(m)
			if n < 0 {
				t.Fatalf("bad bytes in field %d", num)
			}
			fn(num, 0, v)
			m = m[n:]
		default:
			t.Fatalf("unexpected wire type %d for field %d", typ, num)
		}
	}
}

// replaySMB applies every commit of dir to b; after each commit, if
// readEach, it drains the buffer into got (per writer).
func replaySMB(t *testing.T, dir string, b *TraceBuffer, readEach bool, got map[uint16][]string) {
	smb, err := os.ReadFile(filepath.Join(dir, "smb.bin"))
	if err != nil {
		t.Fatal(err)
	}
	commits, err := os.ReadFile(filepath.Join(dir, "commits.bin"))
	if err != nil {
		t.Fatal(err)
	}
	client := ClientIdentity{UID: 1000, PID: 1234}
	for len(commits) > 0 {
		if len(commits) < 4 {
			t.Fatalf("truncated commits.bin")
		}
		n := binary.LittleEndian.Uint32(commits)
		req := commits[4 : 4+n]
		commits = commits[4+n:]
		var patches []func()
		protoFields(t, req, func(num protowire.Number, _ uint64, m []byte) {
			switch num {
			case 1: // chunks_to_move
				var page, chunk uint64
				protoFields(t, m, func(num protowire.Number, v uint64, _ []byte) {
					switch num {
					case 1:
						page = v
					case 2:
						chunk = v
					}
				})
				c := smbChunkAt(t, smb, page, chunk)
				if c.state != 3 {
					t.Fatalf("chunk (%d,%d) state %d, want Complete", page, chunk, c.state)
				}
				b.CopyChunkUntrusted(1, client, c.writer, c.id, c.count, c.flags, true, c.payload)
			case 2: // chunks_to_patch
				var writer uint16
				var id uint32
				var more bool
				var ps []Patch
				protoFields(t, m, func(num protowire.Number, v uint64, pm []byte) {
					switch num {
					case 2:
						writer = uint16(v)
					case 3:
						id = uint32(v)
					case 4:
						var p Patch
						protoFields(t, pm, func(num protowire.Number, v uint64, d []byte) {
							switch num {
							case 1:
								p.Offset = uint32(v)
							case 2:
								copy(p.Data[:], d)
							}
						})
						ps = append(ps, p)
					case 5:
						more = v != 0
					}
				})
				patches = append(patches, func() {
					if !b.TryPatchChunkContents(1, writer, id, ps, more) {
						t.Errorf("patch of writer %d chunk %d failed", writer, id)
					}
				})
			}
		})
		for _, p := range patches {
			p()
		}
		if readEach {
			drainInto(t, b, got)
		}
	}
	if !readEach {
		drainInto(t, b, got)
	}
}

func drainInto(t *testing.T, b *TraceBuffer, got map[uint16][]string) {
	for _, p := range readPackets(b) {
		if p.Dropped != 0 {
			t.Errorf("writer %d packet reported loss %d", p.W, p.Dropped)
		}
		got[p.W] = append(got[p.W], hex.EncodeToString([]byte(p.Data)))
	}
}

func loadPacketsTxt(t *testing.T, dir string) map[uint16][]string {
	f, err := os.Open(filepath.Join(dir, "packets.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[uint16][]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		w, h, ok := strings.Cut(l, " ")
		wid, err := strconv.Atoi(w)
		if !ok || err != nil {
			t.Fatalf("bad packets.txt line %q", l)
		}
		want[uint16(wid)] = append(want[uint16(wid)], h)
	}
	return want
}

// TestPerfettoSMBGolden reassembles the packets of Perfetto's producer-side
// golden SMB captures (Div1 and Div4 layouts), reading once at the end and
// reading after every commit.
func TestPerfettoSMBGolden(t *testing.T) {
	root := goldenDir(t, "perfetto-smb")
	for _, set := range []string{"div1", "pagediv4"} {
		for _, readEach := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/readEach=%v", set, readEach), func(t *testing.T) {
				dir := root
				if set != "div1" {
					dir = filepath.Join(root, set)
				}
				want := loadPacketsTxt(t, dir)
				if len(want[1]) != 9 || len(want[2]) != 4 {
					t.Fatalf("packets.txt: %d + %d packets, want 9 + 4", len(want[1]), len(want[2]))
				}
				b, err := New(256<<10, RingBuffer)
				if err != nil {
					t.Fatal(err)
				}
				got := map[uint16][]string{}
				replaySMB(t, dir, b, readEach, got)
				for w, ps := range want {
					if len(got[w]) != len(ps) {
						t.Fatalf("writer %d: got %d packets, want %d", w, len(got[w]), len(ps))
					}
					for i := range ps {
						if got[w][i] != ps[i] {
							t.Errorf("writer %d packet %d:\n got %s\nwant %s", w, i, got[w][i], ps[i])
						}
					}
				}
				if len(got) != len(want) {
					t.Errorf("read packets of %d writers, want %d", len(got), len(want))
				}
				st := b.Stats()
				if st.PatchesFailed != 0 || st.AbiViolations != 0 || st.ReadaheadsSucceeded != 1 {
					t.Errorf("stats: patches_failed %d abi_violations %d readaheads_succeeded %d; want 0, 0, 1",
						st.PatchesFailed, st.AbiViolations, st.ReadaheadsSucceeded)
				}
			})
		}
	}
}
