package main

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	ipc "github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/smb"
)

// perfettoSourceName is the data source the Perfetto test double registers.
const perfettoSourceName = "chaos.perfetto"

// perfettoMarker is the TestEvent.str of every packet the double writes:
// the reconciliation tells its packets apart by it.
const perfettoMarker = "chaos-perfetto"

// producer is a Perfetto producer speaking the wire protocol over the
// producer socket (the client side of reference/ipc.md, as the pipeline's
// perfettoDouble test producer): it registers one data source and, once
// started, writes rate packets per second through one stall-policy
// TraceWriter. Packet i carries a for_testing TestEvent whose counter is i,
// so the reconciliation knows what it emitted.
type producer struct {
	rate int

	uc      *net.UnixConn
	d       ipc.Deserializer
	rbuf    []byte // read buffer of recv (one reader: serve's goroutine)
	oob     []byte
	sendMu  sync.Mutex // guards rid and writes to uc (commits come from the writing goroutine)
	rid     uint64
	methods map[string]uint32
	gacRID  uint64

	arb      *smb.Arbiter
	mem      *smb.SMB
	instance uint64

	flush   chan uint64   // flush request ids, served by the writing goroutine
	stop    chan struct{} // closed on stop_data_source
	done    chan struct{} // closed when the writing goroutine ended
	started bool

	emitted atomic.Uint64 // packets handed to WritePacket
	failed  atomic.Uint64 // WritePacket errors (stall timeouts): counted by the writer as its loss
	err     error         // why the command loop ended, read after serve returns
}

// dialProducer connects to the socket, retrying until it appears or the
// deadline passes (tracepipe run creates it as it starts).
func dialProducer(path string, rate int, deadline time.Time, alive func() bool) (*producer, error) {
	for {
		c, err := net.Dial("unix", path)
		if err == nil {
			p := &producer{rate: rate, uc: c.(*net.UnixConn), methods: map[string]uint32{},
				flush: make(chan uint64, 16), stop: make(chan struct{}), done: make(chan struct{})}
			if err := p.connect(); err != nil {
				c.Close()
				return nil, err
			}
			return p, nil
		}
		if time.Now().After(deadline) || !alive() {
			return nil, fmt.Errorf("perfetto double: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *producer) send(f *ipc.Frame) error {
	b, err := ipc.AppendFrame(nil, f)
	if err != nil {
		return err
	}
	_ = p.uc.SetWriteDeadline(time.Now().Add(30 * time.Second))
	_, err = p.uc.Write(b)
	return err
}

func (p *producer) invoke(method string, args proto.Message, drop bool) uint64 {
	b, _ := proto.Marshal(args)
	return p.invokeRaw(method, b, drop)
}

func (p *producer) invokeRaw(method string, args []byte, drop bool) uint64 {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	p.rid++
	if args == nil {
		args = []byte{}
	}
	_ = p.send(&ipc.Frame{RequestId: proto.Uint64(p.rid), Msg: &ipc.Frame_MsgInvokeMethod{MsgInvokeMethod: &ipc.Frame_InvokeMethod{
		ServiceId: proto.Uint32(1), MethodId: proto.Uint32(p.methods[method]), ArgsProto: args, DropReply: proto.Bool(drop)}}})
	return p.rid
}

// recv reads one frame and the descriptors that came with it. No read
// deadline: the service may be stopped (SIGSTOP) for a while; the session's
// end closes the connection.
func (p *producer) recv() (*ipc.Frame, []int, error) {
	if p.rbuf == nil {
		p.rbuf, p.oob = make([]byte, 64<<10), make([]byte, unix.CmsgSpace(4*4))
	}
	buf, oob := p.rbuf, p.oob
	var fds []int
	for {
		if f, err := p.d.Next(); f != nil || err != nil {
			return f, fds, err
		}
		n, oobn, _, _, err := p.uc.ReadMsgUnix(buf, oob)
		if oobn > 0 {
			msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
			for _, m := range msgs {
				got, _ := unix.ParseUnixRights(&m)
				fds = append(fds, got...)
			}
		}
		if n > 0 {
			if ferr := p.d.Feed(buf[:n]); ferr != nil {
				return nil, fds, ferr
			}
		}
		if err != nil {
			return nil, fds, err
		}
	}
}

// connect binds ProducerPort, initialises and registers the data source.
func (p *producer) connect() error {
	_ = p.uc.SetReadDeadline(time.Now().Add(30 * time.Second))
	defer p.uc.SetReadDeadline(time.Time{})
	p.sendMu.Lock()
	p.rid++
	err := p.send(&ipc.Frame{RequestId: proto.Uint64(p.rid), Msg: &ipc.Frame_MsgBindService{MsgBindService: &ipc.Frame_BindService{ServiceName: proto.String("ProducerPort")}}})
	p.sendMu.Unlock()
	if err != nil {
		return err
	}
	f, _, err := p.recv()
	if err != nil || !f.GetMsgBindServiceReply().GetSuccess() {
		return fmt.Errorf("perfetto double: bind ProducerPort: %v %v", f, err)
	}
	for _, m := range f.GetMsgBindServiceReply().GetMethods() {
		p.methods[m.GetName()] = m.GetId()
	}
	initRID := p.invoke("InitializeConnection", &ipc.InitializeConnectionRequest{
		SharedMemoryPageSizeHintBytes: proto.Uint32(4096), SharedMemorySizeHintBytes: proto.Uint32(1 << 20),
		ProducerName: proto.String("chaos-double")}, false)
	p.gacRID = p.invoke("GetAsyncCommand", &ipc.GetAsyncCommandRequest{}, false)
	regRID := p.invoke("RegisterDataSource", &ipc.RegisterDataSourceRequest{DataSourceDescriptor: &ipc.DataSourceDescriptor{
		Name: proto.String(perfettoSourceName), WillNotifyOnStart: proto.Bool(true), WillNotifyOnStop: proto.Bool(true)}}, false)
	for _, want := range []uint64{initRID, regRID} {
		f, _, err := p.recv()
		if err != nil || f.GetRequestId() != want || !f.GetMsgInvokeMethodReply().GetSuccess() {
			return fmt.Errorf("perfetto double: reply to %d: %v %v", want, f, err)
		}
	}
	return nil
}

// serve answers commands until the connection ends (the session's end).
func (p *producer) serve() {
	defer func() {
		if p.started {
			select {
			case <-p.stop:
			default:
				close(p.stop)
			}
			<-p.done
		}
		p.uc.Close()
	}()
	for {
		f, fds, err := p.recv()
		if err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return
		}
		if f.GetRequestId() != p.gacRID {
			for _, fd := range fds {
				unix.Close(fd)
			}
			continue // replies to commits and notifications
		}
		var cmd ipc.GetAsyncCommandResponse
		if err := proto.Unmarshal(f.GetMsgInvokeMethodReply().GetReplyProto(), &cmd); err != nil {
			p.err = err
			return
		}
		if err := p.handle(&cmd, fds); err != nil {
			p.err = err
			return
		}
	}
}

func (p *producer) handle(cmd *ipc.GetAsyncCommandResponse, fds []int) error {
	switch c := cmd.Cmd.(type) {
	case *ipc.GetAsyncCommandResponse_SetupTracing_:
		if len(fds) != 1 {
			return fmt.Errorf("perfetto double: setup_tracing with %d descriptors", len(fds))
		}
		s, err := smb.MapFD(fds[0], int(c.SetupTracing.GetSharedBufferPageSizeKb())*1024)
		if err != nil {
			return err
		}
		p.mem = s
		p.arb, err = smb.NewArbiter(s, smb.ArbiterOptions{OnCommit: func(cd *smb.CommitData) {
			p.invokeRaw("CommitData", cd.AppendMarshal(nil), true)
		}, StallTimeout: time.Minute})
		return err
	case *ipc.GetAsyncCommandResponse_StartDataSource_:
		if p.started || p.arb == nil {
			return errors.New("perfetto double: a second start, or a start before setup_tracing")
		}
		p.instance = c.StartDataSource.GetNewInstanceId()
		w, err := p.arb.NewTraceWriter(c.StartDataSource.GetConfig().GetTargetBuffer(), smb.Stall)
		if err != nil {
			return err
		}
		p.invoke("RegisterTraceWriter", &ipc.RegisterTraceWriterRequest{TraceWriterId: proto.Uint32(uint32(w.ID())),
			TargetBuffer: c.StartDataSource.GetConfig().TargetBuffer}, true)
		p.started = true
		go p.write(w)
		p.invoke("NotifyDataSourceStarted", &ipc.NotifyDataSourceStartedRequest{DataSourceId: proto.Uint64(p.instance)}, true)
	case *ipc.GetAsyncCommandResponse_Flush_:
		if p.started {
			select {
			case p.flush <- c.Flush.GetRequestId():
			case <-p.done:
			}
		} else if p.arb != nil {
			p.arb.SendFlushAck(c.Flush.GetRequestId())
		}
	case *ipc.GetAsyncCommandResponse_StopDataSource_:
		if p.started {
			select {
			case <-p.stop:
			default:
				close(p.stop)
			}
			<-p.done
		}
		p.invoke("NotifyDataSourceStopped", &ipc.NotifyDataSourceStoppedRequest{DataSourceId: proto.Uint64(c.StopDataSource.GetInstanceId())}, true)
	}
	return nil
}

// write is the writer's only goroutine: rate packets a second, flushes on
// request, a final flush and close on stop.
func (p *producer) write(w *smb.TraceWriter) {
	defer close(p.done)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	var pkt, ev []byte
	var i uint64
	for {
		select {
		case <-p.stop:
			_ = w.Flush()
			_ = w.Close()
			p.invoke("UnregisterTraceWriter", &ipc.UnregisterTraceWriterRequest{TraceWriterId: proto.Uint32(uint32(w.ID()))}, true)
			return
		case id := <-p.flush:
			_ = w.Flush()
			p.arb.SendFlushAck(id)
		case <-tick.C:
			due := uint64(time.Since(start).Seconds() * float64(p.rate))
			for ; i < due; i++ {
				ev = protowire.AppendTag(ev[:0], 1, protowire.BytesType)
				ev = protowire.AppendString(ev, perfettoMarker)
				ev = protowire.AppendTag(ev, 3, protowire.VarintType)
				ev = protowire.AppendVarint(ev, i)
				pkt = protowire.AppendTag(pkt[:0], 8, protowire.VarintType)
				pkt = protowire.AppendVarint(pkt, i+1)
				pkt = protowire.AppendTag(pkt, 900, protowire.BytesType)
				pkt = protowire.AppendBytes(pkt, ev)
				p.emitted.Add(1)
				if err := w.WritePacket(pkt); err != nil {
					p.failed.Add(1)
				}
				// Keep serving flushes while catching up after a stall.
				select {
				case id := <-p.flush:
					_ = w.Flush()
					p.arb.SendFlushAck(id)
				default:
				}
			}
		}
	}
}

// perfettoCounter returns the TestEvent counter of a packet the double
// wrote.
func perfettoCounter(packet []byte) (uint64, bool) {
	var te []byte
	for len(packet) > 0 {
		num, typ, n := protowire.ConsumeTag(packet)
		if n < 0 {
			return 0, false
		}
		packet = packet[n:]
		m := protowire.ConsumeFieldValue(num, typ, packet)
		if m < 0 {
			return 0, false
		}
		if num == 900 && typ == protowire.BytesType {
			te, _ = protowire.ConsumeBytes(packet)
		}
		packet = packet[m:]
	}
	if te == nil {
		return 0, false
	}
	var marked, has bool
	var v uint64
	for len(te) > 0 {
		num, typ, n := protowire.ConsumeTag(te)
		if n < 0 {
			return 0, false
		}
		te = te[n:]
		m := protowire.ConsumeFieldValue(num, typ, te)
		if m < 0 {
			return 0, false
		}
		switch {
		case num == 1 && typ == protowire.BytesType:
			b, _ := protowire.ConsumeBytes(te)
			marked = string(b) == perfettoMarker
		case num == 3 && typ == protowire.VarintType:
			v, _ = protowire.ConsumeVarint(te)
			has = true
		}
		te = te[m:]
	}
	return v, marked && has
}
