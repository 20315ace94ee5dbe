package pipeline

import (
	"encoding/binary"
	"fmt"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/tracefile"
)

// scripted is a test data source that writes a known packet stream:
// writer w's packet i is scriptedPacket(w, i, size). It is Finite, so a
// session of scripted sources ends when they are done.
//
// Config: writers (int), packets (int per writer), sizes ([]int, cycled),
// in_start (bool: write everything inside Start, before the service can
// drain the SMB — the way to force SMB exhaustion deterministically),
// spoof_every (int: every Nth packet also carries a trusted_uid field,
// which the service must reject).
type scripted struct {
	writers, packets, spoofEvery int
	sizes                        []int
	inStart                      bool
	done                         chan struct{}
	wg                           sync.WaitGroup
	pws                          []plugins.PacketWriter
	errs                         chan error
}

func init() {
	plugins.Register("test.scripted", func(cfg map[string]any) (plugins.DataSource, error) {
		s := &scripted{writers: 1, packets: 10, sizes: []int{100}, done: make(chan struct{}), errs: make(chan error, 64)}
		for k, v := range cfg {
			switch k {
			case "writers":
				s.writers = v.(int)
			case "packets":
				s.packets = v.(int)
			case "spoof_every":
				s.spoofEvery = v.(int)
			case "in_start":
				s.inStart = v.(bool)
			case "sizes":
				s.sizes = nil
				for _, x := range v.([]any) {
					s.sizes = append(s.sizes, x.(int))
				}
			default:
				return nil, fmt.Errorf("%s: unknown key", k)
			}
		}
		return s, nil
	})
}

// scriptedPacket is packet i of writer w: timestamp i and a for_testing
// payload of size bytes starting with (w, i) and filled with a pattern.
func scriptedPacket(w, i, size int, spoof bool) []byte {
	var p []byte
	p = protowire.AppendTag(p, tracefile.FieldTimestamp, protowire.VarintType)
	p = protowire.AppendVarint(p, uint64(i)+1)
	body := make([]byte, max(size, 8))
	binary.LittleEndian.PutUint32(body, uint32(w))
	binary.LittleEndian.PutUint32(body[4:], uint32(i))
	for k := 8; k < len(body); k++ {
		body[k] = byte(w*31 + i + k)
	}
	p = protowire.AppendTag(p, tracefile.FieldForTesting, protowire.BytesType)
	p = protowire.AppendBytes(p, body)
	if spoof {
		p = protowire.AppendTag(p, tracefile.FieldTrustedUID, protowire.VarintType)
		p = protowire.AppendVarint(p, 0) // pretend to be root
	}
	return p
}

func (s *scripted) size(i int) int { return s.sizes[i%len(s.sizes)] }

func (s *scripted) spoof(i int) bool { return s.spoofEvery > 0 && i%s.spoofEvery == s.spoofEvery-1 }

func (s *scripted) writeAll(w int, pw plugins.PacketWriter) {
	for i := 0; i < s.packets; i++ {
		if err := pw.WritePacket(scriptedPacket(w, i, s.size(i), s.spoof(i))); err != nil {
			s.errs <- err
		}
	}
	if err := pw.Flush(); err != nil {
		s.errs <- err
	}
}

func (s *scripted) Start(h plugins.Host) error {
	for w := 0; w < s.writers; w++ {
		pw, err := h.NewWriter()
		if err != nil {
			return err
		}
		s.pws = append(s.pws, pw)
	}
	if s.inStart {
		for w, pw := range s.pws {
			s.writeAll(w, pw)
		}
		close(s.done)
		return nil
	}
	for w, pw := range s.pws {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.writeAll(w, pw)
		}()
	}
	go func() { s.wg.Wait(); close(s.done) }()
	return nil
}

func (s *scripted) Flush() error           { <-s.done; return nil }
func (s *scripted) ClearIncrementalState() {}
func (s *scripted) Stop() error            { <-s.done; return nil }
func (s *scripted) Done() <-chan struct{}  { return s.done }
