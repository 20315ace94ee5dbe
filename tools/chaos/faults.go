package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// faultLoop injects the faults round-robin every s.o.every, from one
// period after the start until 30 s before the session's end (so that the
// restarted servers are up when the session writes its last packets).
func (s *soak) faultLoop(ctx context.Context, start time.Time) {
	names := strings.Split(s.o.faultList, ",")
	t := time.NewTicker(s.o.every)
	defer t.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if time.Since(start) > s.o.duration-30*time.Second {
			return
		}
		name := strings.TrimSpace(names[n%len(names)])
		at := time.Since(start)
		err := s.inject(ctx, name)
		s.mu.Lock()
		s.faults = append(s.faults, faultRecord{at: at, name: name, err: err})
		s.mu.Unlock()
		if err != nil {
			fmt.Printf("chaos: %6.1fs fault %s: %v\n", at.Seconds(), name, err)
		} else {
			fmt.Printf("chaos: %6.1fs fault %s\n", at.Seconds(), name)
		}
	}
}

func (s *soak) inject(ctx context.Context, name string) error {
	pid := s.session.pid()
	if pid == 0 {
		return errors.New("session not running")
	}
	switch name {
	case "kill-plugin":
		kids := childrenNamed(pid, filepath.Base(s.plugin))
		if len(kids) == 0 {
			return errors.New("no plugin process (restarting?)")
		}
		return syscall.Kill(kids[0], syscall.SIGKILL)
	case "restart-nats":
		_ = s.nats.stop(syscall.SIGTERM, 20*time.Second)
		sleep(ctx, 2*time.Second)
		if err := s.nats.start(); err != nil {
			return err
		}
		return waitTCP(strings.TrimPrefix(s.natsURL, "nats://"), 20*time.Second)
	case "kill-serve":
		_ = s.serve.stop(syscall.SIGKILL, 10*time.Second)
		sleep(ctx, 2*time.Second)
		if err := s.serve.start(); err != nil {
			return err
		}
		return waitTCP(s.relayAddr, 20*time.Second)
	case "disk-full":
		if s.smallMounted == "" {
			return errors.New("skipped: no tmpfs")
		}
		return s.fillDisk(ctx, 8*time.Second)
	case "sigstop":
		// Three stops of 1.5 s: the producers stall on full SMBs meanwhile.
		for range 3 {
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				return err
			}
			sleep(ctx, 1500*time.Millisecond)
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				return err
			}
			sleep(ctx, 500*time.Millisecond)
		}
		return nil
	case "cpu-hog":
		// One busy loop per CPU for 8 s, beside the service.
		hctx, cancel := context.WithTimeout(ctx, 8*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		for range max(2, numCPU()) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				x := uint64(1)
				for hctx.Err() == nil {
					for range 100000 {
						x = x*6364136223846793005 + 1442695040888963407
					}
				}
				_ = x
			}()
		}
		wg.Wait()
		return nil
	case "rotate", "snapshot":
		c := exec.CommandContext(ctx, s.tp, name, "--session", s.name)
		c.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+filepath.Join(s.dir, "run"))
		out, err := c.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	return fmt.Errorf("unknown fault %q", name)
}

// fillDisk fills the small sink's file system for hold, then frees it.
func (s *soak) fillDisk(ctx context.Context, hold time.Duration) error {
	var st unix.Statfs_t
	if err := unix.Statfs(s.smallMounted, &st); err != nil {
		return err
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	path := filepath.Join(s.smallMounted, "filler")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	defer f.Close()
	// fallocate what is free, then write until ENOSPC for any rest.
	_ = unix.Fallocate(int(f.Fd()), 0, 0, free)
	buf := make([]byte, 4096)
	off, _ := f.Seek(0, 2)
	for {
		if _, err := f.WriteAt(buf, off); err != nil {
			break
		}
		off += int64(len(buf))
	}
	sleep(ctx, hold)
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
