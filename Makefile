# The test command named in README.md. CI (.ci/run) calls exactly `make test`.
GO ?= go

.PHONY: test tracepiped vet fmt-check sched unit bench soak snapload docs interleave killloop build memcheck producerbench chaos

test: vet fmt-check sched unit

# The scrape/commit/read interleaving tests of smb (build tag smbsched:
# yield points between the SMB's ordered atomic accesses).
sched:
	$(GO) test -tags smbsched -timeout 10m -run 'TestInterleaveScrapeCommitRead|TestScrapeTornHeaderOfReusedChunk' ./smb

# ./tracepipe, its --version stamped with the git revision, commit time and
# work-tree state (also where the go command records none: a git worktree,
# GOFLAGS=-buildvcs=false).
build:
	$(GO) build -ldflags "-X main.stampRevision=$$(git rev-parse HEAD 2>/dev/null) \
		-X main.stampTime=$$(TZ=UTC git log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd 2>/dev/null) \
		-X main.stampModified=$$(if [ -n "$$(git status --porcelain 2>/dev/null)" ]; then echo true; else echo false; fi)" \
		-o tracepipe ./cmd/tracepipe

# ./tracepiped: the Perfetto service alone (docs/perfetto.md), static, so
# that it maps no libc (issue 27: its peak RSS within its buffers + 16 MiB).
tracepiped:
	CGO_ENABLED=0 $(GO) build -o tracepiped ./cmd/tracepiped

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

# The golden conformance suites skip, outside CI, when ../shared is
# missing; each skip is logged (internal/testsupport, TESTSUPPORT_SKIP_LOG)
# and the run ends with one line saying which and why.
unit:
	@echo "$(GO) test -race -timeout 20m ./..."; \
	skips=$$(mktemp); \
	TESTSUPPORT_SKIP_LOG=$$skips $(GO) test -race -timeout 20m ./...; rc=$$?; \
	if [ -s "$$skips" ]; then \
		echo "SKIPPED: $$(wc -l < "$$skips" | tr -d ' ') golden conformance tests in $$(cut -f1 "$$skips" | sort -u | paste -sd ' ' -): $$(cut -f3 "$$skips" | sed 's|/golden/.*|/golden|' | sort -u | head -n1) is missing (CI is unset, so they skip; with CI set they fail)"; \
	fi; \
	rm -f "$$skips"; exit $$rc

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The long-trace soak (issue 10), not part of `make test`: 30 minutes at
# 20 MB/s, zstd rotation every 64 MiB, 4 synthetic writers + process_stats
# + sys_stats; writes a CSV of RSS/goroutines/fds every 10 s and checks RSS
# flatness, zero loss, every file alone and the set exactly once.
# Shorter: make soak SOAK_DURATION=3m
SOAK_DURATION ?= 30m
soak:
	$(GO) run ./tools/soak -duration $(SOAK_DURATION)

# The flight recorder's load acceptance (issue 16), not part of `make
# test`: 60 s at 200 MB/s into a 256 MiB ring with a snapshot every 2 s;
# fails on any producer loss. Baseline without snapshots:
# make snapload SNAPLOAD_FLAGS='-every 0'
SNAPLOAD_FLAGS ?=
snapload:
	$(GO) run ./tools/snapload $(SNAPLOAD_FLAGS)

# The generated docs: the configuration reference and its JSON Schema, from
# the code's config schema (config/config_schema.go), and the Perfetto
# TraceConfig fields the consumer port maps and refuses
# (config/perfetto_fields.go). A test (cmd/tracepipe
# TestDocsConfigReferenceIsCurrent) fails when they are stale.
docs:
	$(GO) run ./cmd/tracepipe config reference > docs/configuration-reference.md
	$(GO) run ./cmd/tracepipe config schema > docs/config.schema.json
	$(GO) run ./cmd/tracepipe config perfetto-fields > docs/perfetto-traceconfig.md

# More schedules of the scrape/commit/read interleaving test than `make
# test` runs: make interleave SCHEDULES=20000
SCHEDULES ?= 5000
interleave:
	$(GO) test -tags smbsched -timeout 60m -run TestInterleaveScrapeCommitRead ./smb -interleave.schedules $(SCHEDULES)

# The starvation acceptance of issue 24, not part of `make test`: the
# kill-at-random-moments test N times beside HOGS busy loops; fails on any
# gap. make killloop N=1000 HOGS=2
N ?= 1000
HOGS ?= 2
killloop:
	N=$(N) HOGS=$(HOGS) ./tools/killloop/killloop.sh

# Issue 27's figures, not part of `make test` (the machine's load shows in
# them: compare runs made together). memcheck: peak RSS (VmHWM) of real
# `tracepipe run`s, the issue's 2x100 MB/s workload and every example
# config, against their buffers + SMBs (target: + 16 MiB). producerbench:
# the Perfetto producer path as the C SDK drives it (a producer process,
# 200 B / 1 KiB packets, 1 / 2 writers, flush every 100 ms / 1 s / 10 s;
# commits per chunk, and commit=posted batched as the SDK's arbiter does):
# service CPU-s per GB, delivered %, producer drop % and ns per packet.
memcheck:
	$(GO) test ./cmd/tracepipe -run '^$$' -bench 'PeakRSS' -benchtime 1x -count 3

producerbench:
	$(GO) test ./pipeline -run '^$$' -bench PerfettoProducerPath -benchtime 1x -count 3 -timeout 30m

# The chaos soak (issue 24), not part of `make test`: a real `tracepipe
# run` (in-process synthetic writers, the synthetic source as a plugin with
# restart on, a Perfetto producer double) into a rotating file sink, a file
# sink on a small tmpfs, a relay sink into `tracepipe serve` and a NATS
# sink into nats-server, while faults come round-robin: kill -9 of the
# plugin, nats-server restarted, serve killed and restarted, the tmpfs
# filled, the service SIGSTOPped, a CPU hog, rotate, snapshot. It then
# reconciles every sequence (emitted = delivered + counted loss) and exits
# non-zero when a packet is unexplained; chaos.csv and rss.csv stay in the
# kept working directory. Needs root for the tmpfs (else no disk-full fault).
# Shorter: make chaos CHAOS_DURATION=3m
CHAOS_DURATION ?= 30m
CHAOS_FLAGS ?=
chaos:
	$(GO) run ./tools/chaos -duration $(CHAOS_DURATION) $(CHAOS_FLAGS)
