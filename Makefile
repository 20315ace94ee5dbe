# The test command named in README.md. CI (.ci/run) calls exactly `make test`.
GO ?= go

.PHONY: test vet fmt-check unit bench soak snapload memcheck producerbench

test: vet fmt-check unit

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

unit:
	$(GO) test -race -timeout 20m ./...

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

# Issue 27's figures, not part of `make test` (the machine's load shows in
# them: compare runs made together). memcheck: peak RSS (VmHWM) of real
# `tracepipe run`s, the issue's 2x100 MB/s workload and every example
# config, against their buffers + SMBs (target: + 16 MiB). producerbench:
# the Perfetto producer path as the C SDK drives it (a producer process,
# 200 B / 1 KiB packets, 1 / 2 writers, flush every 100 ms / 1 s / 10 s):
# service CPU-s per GB, delivered %, producer drop % and ns per packet.
memcheck:
	$(GO) test ./cmd/tracepipe -run '^$$' -bench 'PeakRSS' -benchtime 1x -count 3

producerbench:
	$(GO) test ./pipeline -run '^$$' -bench PerfettoProducerPath -benchtime 1x -count 3 -timeout 30m
