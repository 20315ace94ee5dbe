package main

import (
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tracepipe/tracepipe/tracefile"
)

// reconcile reads every output, writes chaos.csv and prints the summary;
// it returns false when a packet is unexplained or the run cannot be
// judged.
func (s *soak) reconcile(pd *producer, samples []sample, sessionErr error, natsFiles []string) (bool, string, error) {
	ok := true
	fail := func(format string, args ...any) {
		ok = false
		fmt.Printf("chaos: FAIL: "+format+"\n", args...)
	}
	ref := readOutput("reference", traceFiles(filepath.Join(s.dir, "out", "ref.pftrace")))
	if len(ref.files) == 0 || len(ref.seqs) == 0 {
		fail("the reference output holds no sequence (%d files)", len(ref.files))
	}
	for _, e := range ref.readErrs {
		fail("reference: %s", e)
	}
	if !ref.hasStats {
		fail("reference: no TraceStats")
	}
	emittedByDouble := pd.emitted.Load()
	rows := reconcileReference(ref, emittedByDouble)
	emitted, delivered, counted, unexplained := totals(rows)
	fmt.Printf("chaos: reference: %d files, %d sequences, %d packets; loss counters: %s\n",
		len(ref.files), len(ref.seqs), ref.packets, s.short(lossCauses(ref)))
	fmt.Printf("chaos: perfetto double: %d packets written, %d write failures (stall timeouts)\n", emittedByDouble, pd.failed.Load())

	// The copies.
	var copies []*output
	if s.smallDir != "" {
		small := readOutput("small", traceFiles(filepath.Join(s.smallDir, "small.pftrace")))
		small.only = "perfetto" // its filter keeps the double's packets
		copies = append(copies, small)
	}
	copies = append(copies, readOutput("relay", servedFiles(filepath.Join(s.dir, "relay"))))
	copies = append(copies, readOutput("nats", natsFiles))
	var copyUnexplained, copyCounted uint64
	var copyLines []string
	for _, c := range copies {
		crow, dropped := reconcileCopy(ref, c)
		rows = append(rows, crow...)
		e, d, k, u := totals(crow)
		copyUnexplained += u
		copyCounted += k
		line := fmt.Sprintf("%s: %d files, %d of %d reference packets, missing %d (counted by its sink_packets_dropped %d: %d), unexplained %d; loss counters: %s",
			c.name, len(c.files), d, e, e-d, dropped, k, u, s.short(lossCauses(c)))
		for _, err := range c.readErrs {
			line += "; read error " + err
		}
		copyLines = append(copyLines, line)
	}
	for _, l := range copyLines {
		fmt.Println("chaos: copy", l)
	}
	if err := writeRows(filepath.Join(s.dir, "chaos.csv"), rows); err != nil {
		return false, "", err
	}

	// Faults.
	byName := map[string][2]int{}
	s.mu.Lock()
	for _, f := range s.faults {
		c := byName[f.name]
		c[0]++
		if f.err != nil {
			c[1]++
		}
		byName[f.name] = c
	}
	nFaults := len(s.faults)
	s.mu.Unlock()
	var fl []string
	for _, n := range strings.Split(s.o.faultList, ",") {
		c := byName[strings.TrimSpace(n)]
		fl = append(fl, fmt.Sprintf("%s×%d(failed %d)", strings.TrimSpace(n), c[0], c[1]))
	}
	fmt.Printf("chaos: %d faults: %s\n", nFaults, strings.Join(fl, " "))

	// RSS.
	if len(samples) > 0 {
		d := s.o.duration
		early, late := meanRSS(samples, d/6, d/3), meanRSS(samples, d*2/3, d+time.Hour)
		var peak int64
		for _, x := range samples {
			peak = max(peak, x.sessionRSS)
		}
		growth := 0.0
		if early > 0 {
			growth = float64(late-early) / float64(early)
		}
		fmt.Printf("chaos: session RSS: start %.1f MiB, mean %.1f MiB in [%v, %v], %.1f MiB in the last third (%+.1f%%), peak %.1f MiB, end %.1f MiB; %d samples in rss.csv\n",
			mib(samples[0].sessionRSS), mib(early), d/6, d/3, mib(late), 100*growth, mib(peak), mib(samples[len(samples)-1].sessionRSS), len(samples))
		if d >= 10*time.Minute && (early == 0 || growth > s.o.rssTol) {
			fail("session RSS not flat: %+.1f%% (bound %.0f%%)", 100*growth, 100*s.o.rssTol)
		}
	}
	if sessionErr != nil {
		fmt.Printf("chaos: note: the session ended with %v (see logs/session.log)\n", sessionErr)
	}
	if unexplained != 0 {
		fail("%d reference packets unexplained (see chaos.csv, rows with unexplained > 0)", unexplained)
	}
	if copyUnexplained != 0 {
		fail("%d packets of the copies unexplained", copyUnexplained)
	}
	if ref.hasStats && lossCauses(ref) != "none" {
		fmt.Printf("chaos: note: the reference's counters record loss under the stall policy (%s) while %d of its packets are missing (counted %d, unexplained %d)\n",
			s.short(lossCauses(ref)), counted+unexplained, counted, unexplained)
	}
	if s.o.strict && ref.hasStats {
		for _, r := range tracefile.LossReport(ref.stats) {
			if strictLoss(r) {
				fail("-fail-on-counters: %s = %d (buffer %d; -1: service-wide) in the reference under the stall policy", s.short(r.Name), r.Value, r.Index)
			}
		}
	}
	causes := []string{"reference: " + s.short(lossCauses(ref))}
	for _, c := range copies {
		causes = append(causes, c.name+": "+s.short(lossCauses(c)))
	}
	last := fmt.Sprintf("chaos: emitted %d, delivered %d, lost (counted) %d (copies: %d) by cause [%s], unexplained %d (reference %d, copies %d)",
		emitted, delivered, counted, copyCounted, strings.Join(causes, "; "), unexplained+copyUnexplained, unexplained, copyUnexplained)
	return ok, last, nil
}

// short drops the build directory from plugin paths in counter names.
func (s *soak) short(causes string) string {
	return strings.ReplaceAll(causes, s.bin+string(filepath.Separator), "")
}

func writeRows(path string, rows []seqFigures) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"output", "source", "sequence_id", "emitted", "delivered", "duplicates", "lost_counted", "unexplained"})
	for _, r := range rows {
		_ = w.Write([]string{r.output, r.key.kind, strconv.FormatUint(uint64(r.key.id), 10), strconv.FormatUint(r.emitted, 10),
			strconv.FormatUint(r.delivered, 10), strconv.FormatUint(r.duplicates, 10), strconv.FormatUint(r.counted, 10), strconv.FormatUint(r.unexplain, 10)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// strictLoss reports whether -fail-on-counters fails on a row of the
// reference's loss report: a data-loss counter of the reference itself.
// A plugin death is the injected kill-plugin fault. The rows of the other
// sinks (peer_sinks, "sinks[i] (destination).packets_dropped" and
// ".failed") say that another copy is incomplete, as the disk-full fault
// makes the small sink's; each copy is reconciled against its own counters
// separately, and the reference they are written into lost nothing.
func strictLoss(r tracefile.LossRow) bool {
	return r.Lost() && !strings.HasSuffix(r.Name, ".died") && !strings.HasPrefix(r.Name, "sinks[")
}
