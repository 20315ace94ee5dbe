package pipeline

import (
	"context"
	"time"

	"github.com/tracepipe/tracepipe/control/ctlapi"
)

// ControlHandler adapts the session to package control's Handler (and
// TriggerNamer, so the socket refuses trigger names the session does not
// know), to serve its control socket (`tracepipe sessions`, `trigger`,
// `snapshot`, `rotate`, `stop`). name is the session's unique_session_name,
// start when it started; a stop request calls stop, which should stop
// the session gracefully, as SIGINT does. The handler calls only the
// Service's exported API, each method safe from the control server's
// goroutines.
func (s *Service) ControlHandler(name string, start time.Time, stop func()) ctlapi.Handler {
	return &controlHandler{svc: s, name: name, start: start, stop: stop}
}

// controlHandler is ControlHandler's adapter.
type controlHandler struct {
	svc   *Service
	name  string
	start time.Time
	stop  func()
}

func (c *controlHandler) Info() ctlapi.Info {
	st := c.svc.Status()
	sn := c.svc.SnapshotStats()
	in := ctlapi.Info{Name: c.name, Start: c.start, Losses: st.Losses - st.RingOverwrites, RingOverwrites: st.RingOverwrites, BytesIn: st.BytesIn,
		SnapshotsTaken: sn.Taken, SnapshotsFailed: sn.Failed, SnapshotsRefused: sn.Refused,
		MemoryBytes: uint64(st.Memory.Total())}
	for _, b := range st.Buffers {
		in.Buffers = append(in.Buffers, ctlapi.BufferInfo{Name: b.Name, Size: uint64(b.Size), Fill: b.Fill()})
	}
	return in
}

func (c *controlHandler) Trigger(names []string) ([]string, int) {
	acted := c.svc.ActivateTriggers("", names...)
	return acted, len(names) - len(acted)
}

// TriggerNames makes the control server refuse unknown trigger names
// (ctlapi.TriggerNamer).
func (c *controlHandler) TriggerNames() []string { return c.svc.TriggerNames() }

func (c *controlHandler) Snapshot(ctx context.Context, path, trigger string) (ctlapi.SnapshotResult, error) {
	select {
	case r := <-c.svc.Snapshot(SnapshotRequest{Trigger: trigger, Path: path}):
		return ctlapi.SnapshotResult{Number: r.N, Files: r.Files, Packets: r.Packets, Bytes: r.Bytes, Pause: r.Pause}, r.Err
	case <-ctx.Done():
		return ctlapi.SnapshotResult{}, ctx.Err()
	}
}

func (c *controlHandler) Rotate() ([]string, error) { return c.svc.Rotate() }
func (c *controlHandler) Stop()                     { c.stop() }

var (
	_ ctlapi.TriggerNamer = (*controlHandler)(nil)
	_ ctlapi.AlertSession = (*Service)(nil)
)
