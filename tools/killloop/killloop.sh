#!/bin/sh
# killloop: TestServiceSIGKILLRandomMomentsRotating (kill -9 at a random
# moment of a rotating stall-policy stream, then check every sequence is
# a gap-free prefix) run N times beside a CPU hog, the starved-service
# condition under which a scrape lost packets (issue 24). It prints the
# number of runs, of failed runs and the time taken, and exits non-zero
# when a run found a gap.
#
#   make killloop N=1000 HOGS=2
#
# Each run is one kill; runs go in batches of 20 per test process, so a
# failed run ends its batch (the batch counts as one failure).
set -eu
N=${N:-1000}
HOGS=${HOGS:-2}
BATCH=${BATCH:-20}
dir=$(mktemp -d)
hogs=""
cleanup() {
	for p in $hogs; do kill "$p" 2>/dev/null || true; done
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM
# KILLLOOP_BIN runs a test binary built elsewhere (e.g. from an older
# commit, to see the loop find the gap there).
bin=${KILLLOOP_BIN:-}
if [ -z "$bin" ]; then
	bin="$dir/pipeline.test"
	go test -c -o "$bin" ./pipeline
fi
i=0
while [ "$i" -lt "$HOGS" ]; do
	sh -c 'while :; do :; done' &
	hogs="$hogs $!"
	i=$((i + 1))
done
start=$(date +%s)
done_runs=0
failed=0
while [ "$done_runs" -lt "$N" ]; do
	b=$BATCH
	if [ $((N - done_runs)) -lt "$b" ]; then b=$((N - done_runs)); fi
	if ! (cd pipeline && TRACEPIPE_KILL_RUNS=$b "$bin" \
		-test.run '^TestServiceSIGKILLRandomMomentsRotating$' -test.count=1 >"$dir/out" 2>&1); then
		failed=$((failed + 1))
		grep -m3 -E 'not a prefix|FAIL|panic' "$dir/out" || tail -5 "$dir/out"
	fi
	done_runs=$((done_runs + b))
	echo "killloop: $done_runs/$N runs, $failed failed batch(es), $(( $(date +%s) - start ))s"
done
echo "killloop: $N runs beside $HOGS CPU hog(s): $failed failed batch(es) in $(( $(date +%s) - start ))s"
[ "$failed" -eq 0 ]
