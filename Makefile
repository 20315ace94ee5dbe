# The test command named in README.md. CI (.ci/run) calls exactly `make test`.
GO ?= go

.PHONY: test vet fmt-check unit bench soak snapload chaos

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
