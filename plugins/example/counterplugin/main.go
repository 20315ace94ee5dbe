// Command counterplugin is an example tracepipe data-source plugin. It
// serves one data source, "example.counter", through plugins/sdk; the
// plugin host (plugins/host) starts it as a child process.
//
// Config (data_sources[i].config):
//
//	packets: number of packets to write (default 100, >= 0)
//	size:    length in bytes of each packet's TestEvent.str (default 64, 0..16 MiB)
//	trigger: a trigger name to activate once every packet is written
//	         (plugins.ActivateTriggers: the session's trigger_config decides)
//
// Packet i (0-based) is a TracePacket with timestamp (field 8) = the
// CLOCK_BOOTTIME time it was written (trackevent.Now, the clock of the
// session's clock snapshots; strictly increasing from packet to packet) and
// for_testing (field 900) = a valid TestEvent (Perfetto's test_event.proto):
// seq_value (2) = i, counter (3) = i, str (1) = size ASCII letters, byte j
// being 'a' + j%26. Strict decoders (protoc --decode, Python protobuf)
// accept it. The packets go through
// one writer, which is flushed at the end; the source is plugins.Finite and
// its Done channel closes once every packet is written.
//
// Run by hand it only explains that it is a plugin. To have plugin_dir
// find it, name the binary by the plugin convention:
//
//	go build -o DIR/tracepipe-plugin-counter ./plugins/example/counterplugin
package main

import (
	"fmt"
	"log"
	"math"
	"sort"
	"strings"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/plugins/sdk"
	"github.com/tracepipe/tracepipe/plugins/trackevent"
)

// Name is the data source name this plugin serves.
const Name = "example.counter"

// maxSize bounds a packet's payload.
const maxSize = 16 << 20

func main() {
	sdk.ServeSources(sdk.Source{
		Name:        Name,
		Description: "writes a fixed number of TestEvent packets, then is done (plugins.Finite)",
		ConfigKeys: []sdk.ConfigKey{
			{Name: "packets", Type: "integer", Default: "100", Description: "number of packets to write (>= 0)"},
			{Name: "size", Type: "integer", Default: "64", Description: "length of each TestEvent's str, in bytes (0..16 MiB)"},
		},
		Factory: newCounter,
	})
}

// counter writes config.packets packets, then is done.
type counter struct {
	packets int64
	size    int64
	trigger string
	host    plugins.Host

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
			case n < 0 || n > maxSize:
				problems = append(problems, fmt.Sprintf("size: must be in [0, %d], got %d", maxSize, n))
			default:
				c.size = n
			}
		case "trigger":
			s, ok := v.(string)
			if !ok || s == "" {
				problems = append(problems, fmt.Sprintf("trigger: must be a non-empty string, got %T", v))
			}
			c.trigger = s
		default:
			problems = append(problems, fmt.Sprintf("%s: unknown key (known: packets, size, trigger)", k))
		}
	}
	if len(problems) > 0 {
		// One "key: message" line per problem: the service shows each as
		// data_sources[i].config.key.
		return nil, fmt.Errorf("%s", strings.Join(problems, "\n"))
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
	c.host = h
	go c.run(w)
	return nil
}

func (c *counter) run(w plugins.PacketWriter) {
	defer close(c.done)
	str := make([]byte, c.size)
	for j := range str {
		str[j] = 'a' + byte(j%26)
	}
	var pkt, event []byte
	var ts uint64
	for i := int64(0); i < c.packets; i++ {
		select {
		case <-c.stop:
			c.err = w.Flush()
			return
		case reply := <-c.flush:
			reply <- w.Flush()
		default:
		}
		event = appendTestEvent(event[:0], i, str)
		pkt = protowire.AppendTag(pkt[:0], 8, protowire.VarintType)
		// A real clock, so that the packets fall inside the session
		// (stamping 1, 2, 3 ns put them decades before it:
		// check's timestamps_outside_session).
		ts = max(ts+1, trackevent.Now())
		pkt = protowire.AppendVarint(pkt, ts)
		pkt = protowire.AppendTag(pkt, 900, protowire.BytesType)
		pkt = protowire.AppendBytes(pkt, event)
		if err := w.WritePacket(pkt); err != nil {
			// Under the stall policy a timed-out packet is lost (and
			// accounted by the writer); keep going.
			log.Printf("%s: packet %d: %v", Name, i, err)
		}
	}
	c.err = w.Flush()
	if c.trigger != "" {
		plugins.ActivateTriggers(c.host, c.trigger)
	}
}

// TestEvent field numbers (Perfetto's protos/perfetto/trace/test_event.proto).
const (
	testEventStr      = 1 // string
	testEventSeqValue = 2 // uint32
	testEventCounter  = 3 // uint64
)

// appendTestEvent appends the TestEvent of packet i.
func appendTestEvent(b []byte, i int64, str []byte) []byte {
	b = protowire.AppendTag(b, testEventStr, protowire.BytesType)
	b = protowire.AppendBytes(b, str)
	b = protowire.AppendTag(b, testEventSeqValue, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(uint32(i)))
	b = protowire.AppendTag(b, testEventCounter, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(i))
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
