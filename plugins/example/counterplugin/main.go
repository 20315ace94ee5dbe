// Command counterplugin is an example tracepipe data-source plugin. It
// serves one data source, "example.counter", through plugins/sdk; the
// plugin host (plugins/host) starts it as a child process.
//
// Config (data_sources[i].config):
//
//	packets: number of packets to write (default 100, >= 0)
//	size:    size in bytes of each packet's for_testing payload (default 64, 4..16 MiB)
//
// Packet i (0-based) is a TracePacket with timestamp (field 8) = i+1 and
// for_testing (field 900) = size bytes: i as 4 little-endian bytes, then
// byte j at offset j (j >= 4, truncated to 8 bits). The packets go through
// one writer, which is flushed at the end; the source is plugins.Finite and
// its Done channel closes once every packet is written.
//
// Run by hand it only explains that it is a plugin.
package main

import (
	"encoding/binary"
	"fmt"
	"log"
	"math"
	"sort"
	"strings"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/plugins/sdk"
)

// Name is the data source name this plugin serves.
const Name = "example.counter"

// maxSize bounds a packet's payload.
const maxSize = 16 << 20

func main() {
	sdk.Serve(map[string]plugins.Factory{Name: newCounter})
}

// counter writes config.packets packets, then is done.
type counter struct {
	packets int64
	size    int64

	stop  chan struct{}   // closed by Stop
	flush chan chan error // Flush requests, served by the writing goroutine
	done  chan struct{}   // closed when the writing goroutine ended
	once  sync.Once
	err   error // the writing goroutine's error, read after done
}

func newCounter(config map[string]any) (plugins.DataSource, error) {
	c := &counter{packets: 100, size: 64, stop: make(chan struct{}), flush: make(chan chan error), done: make(chan struct{})}
	var problems []string
	keys := make([]string, 0, len(config))
	for k := range config {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := config[k]
		switch k {
		case "packets":
			n, p := integer(v)
			switch {
			case p != "":
				problems = append(problems, "packets: "+p)
			case n < 0:
				problems = append(problems, fmt.Sprintf("packets: must be >= 0, got %d", n))
			default:
				c.packets = n
			}
		case "size":
			n, p := integer(v)
			switch {
			case p != "":
				problems = append(problems, "size: "+p)
			case n < 4 || n > maxSize:
				problems = append(problems, fmt.Sprintf("size: must be in [4, %d], got %d", maxSize, n))
			default:
				c.size = n
			}
		default:
			problems = append(problems, fmt.Sprintf("%s: unknown key (known: packets, size)", k))
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return c, nil
}

// integer accepts Go integers and integral float64s (JSON numbers).
func integer(v any) (int64, string) {
	switch n := v.(type) {
	case int:
		return int64(n), ""
	case int64:
		return n, ""
	case int32:
		return int64(n), ""
	case uint32:
		return int64(n), ""
	case float64:
		if n != math.Trunc(n) || math.IsInf(n, 0) || n < math.MinInt64 || n >= math.MaxInt64 {
			return 0, fmt.Sprintf("must be an integer, got %v", n)
		}
		return int64(n), ""
	default:
		return 0, fmt.Sprintf("must be an integer, got %T", v)
	}
}

func (c *counter) Start(h plugins.Host) error {
	w, err := h.NewWriter()
	if err != nil {
		close(c.done)
		return err
	}
	go c.run(w)
	return nil
}

func (c *counter) run(w plugins.PacketWriter) {
	defer close(c.done)
	payload := make([]byte, c.size)
	for j := 4; j < len(payload); j++ {
		payload[j] = byte(j)
	}
	var pkt []byte
	for i := int64(0); i < c.packets; i++ {
		select {
		case <-c.stop:
			c.err = w.Flush()
			return
		case reply := <-c.flush:
			reply <- w.Flush()
		default:
		}
		binary.LittleEndian.PutUint32(payload, uint32(i))
		pkt = protowire.AppendTag(pkt[:0], 8, protowire.VarintType)
		pkt = protowire.AppendVarint(pkt, uint64(i+1))
		pkt = protowire.AppendTag(pkt, 900, protowire.BytesType)
		pkt = protowire.AppendBytes(pkt, payload)
		if err := w.WritePacket(pkt); err != nil {
			// Under the stall policy a timed-out packet is lost (and
			// accounted by the writer); keep going.
			log.Printf("%s: packet %d: %v", Name, i, err)
		}
	}
	c.err = w.Flush()
}

// Flush asks the writing goroutine (the writer's only user) to flush. Once
// everything is written the writer is already flushed.
func (c *counter) Flush() error {
	reply := make(chan error, 1)
	select {
	case c.flush <- reply:
		return <-reply
	case <-c.done:
		return nil
	}
}

func (c *counter) ClearIncrementalState() {} // no incremental state

func (c *counter) Stop() error {
	c.once.Do(func() { close(c.stop) })
	<-c.done
	return c.err
}

func (c *counter) Done() <-chan struct{} { return c.done }

var _ plugins.Finite = (*counter)(nil)
