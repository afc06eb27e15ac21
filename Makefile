# kiln — the two commands of the quick start, and a few more.
#   make run    build, then run the demo (GPU if there is one, else CPU, and it says which)
#   make test   build, then run every test (GPU tests are skipped, visibly, without a GPU)
#   make bench  build, then every benchmark against its peer, a summary and docs (needs a GPU)
# Missing Debian packages are installed first when run as root.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

FUZZ_SECONDS ?= 30

.PHONY: all deps build run test test-asan test-valgrind fuzz lint bench bench-run clean

all: build

deps:
	@sh scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS)

run: build
	./$(BUILD)/tools/kiln-demo

# Host tests again under AddressSanitizer + UndefinedBehaviorSanitizer (a CPU-only build, so the
# kernels are not compiled twice), then every test of the main build, whose summary comes last.
test: build lint test-asan test-valgrind fuzz
	cd $(BUILD) && ctest --output-on-failure

test-asan: deps
	cmake -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=Debug -DKILN_WITH_CUDA=OFF -DKILN_SANITIZE=ON -DKILN_BUILD_TOOLS=OFF
	cmake --build $(BUILD)-asan -j$(JOBS)
	cd $(BUILD)-asan && ASAN_OPTIONS=detect_leaks=1 ctest -L host --output-on-failure

# The host test programs under valgrind memcheck (definite leaks and invalid accesses fail).
test-valgrind: build
	@for t in $(BUILD)/tests/test_half $(BUILD)/tests/test_matmul_host $(BUILD)/tests/test_runtime_host \
	          $(BUILD)/tests/test_attention_host $(BUILD)/tests/test_int8_host $(BUILD)/tests/test_qweight_host \
	          $(BUILD)/tests/test_int4_host $(BUILD)/tests/test_qkv_host; do \
	  valgrind -q --error-exitcode=9 --leak-check=full --errors-for-leak-kinds=definite $$t >$$t.valgrind.log 2>&1; \
	  rc=$$?; echo "kiln: valgrind $$(basename $$t): exit $$rc"; \
	  if [ $$rc -ne 0 ]; then tail -30 $$t.valgrind.log; exit 1; fi; \
	done
	@# the driver-fault modes against the fake driver (77: skipped, a build without kernels)
	@for m in old missing nodevice healthy oom noimage badordinal launchfail sm89 loadfail nokernel nofunction oldgpu; do \
	  log=$(BUILD)/tests/test_driver_faults.$$m.valgrind.log; \
	  KILN_LIBCUDA=$(CURDIR)/$(BUILD)/tests/libfake_libcuda.so FAKE_CUDA_MODE=$$m \
	    valgrind -q --error-exitcode=9 --leak-check=full --errors-for-leak-kinds=definite \
	    $(BUILD)/tests/test_driver_faults $$m >$$log 2>&1; \
	  rc=$$?; echo "kiln: valgrind test_driver_faults $$m: exit $$rc"; \
	  if [ $$rc -ne 0 ] && [ $$rc -ne 77 ]; then tail -30 $$log; exit 1; fi; \
	done

# The Clang static analyzer over the library (.clang-tidy says which checks; any warning fails),
# from a CPU-only configuration's compile commands. Skipped, saying so, without clang-tidy.
lint: deps
	@if ! command -v clang-tidy >/dev/null; then echo "kiln: SKIP lint: clang-tidy not installed (apt-get install clang-tidy)"; exit 0; fi; \
	cmake -S . -B $(BUILD)-lint -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DKILN_WITH_CUDA=OFF -DKILN_BUILD_TESTS=OFF \
	  -DKILN_BUILD_TOOLS=OFF >/dev/null && \
	echo "kiln: lint: clang-tidy $$(clang-tidy --version | sed -n 's/.*version \([0-9.]*\).*/\1/p') over src/" && \
	ls src/*/*.c | xargs -P$(JOBS) -n4 clang-tidy -p $(BUILD)-lint --quiet && echo "kiln: lint: no findings"

# Every libFuzzer target for FUZZ_SECONDS, starting from the seed corpus (new inputs go to a
# scratch folder; a crash leaves its input in $(BUILD)-fuzz to turn into a regression seed).
fuzz: deps
	@if ! command -v clang >/dev/null; then echo "kiln: fuzz skipped: clang not installed"; exit 0; fi; \
	CC=clang cmake -S . -B $(BUILD)-fuzz -DCMAKE_BUILD_TYPE=Debug -DKILN_FUZZ=ON -DKILN_WITH_CUDA=OFF \
	  -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_TOOLS=OFF && cmake --build $(BUILD)-fuzz -j$(JOBS) && \
	for t in $(BUILD)-fuzz/fuzz_*; do \
	  [ -f "$$t" ] && [ -x "$$t" ] || continue; \
	  name=$$(basename $$t); mkdir -p $(BUILD)-fuzz/new-$$name; \
	  echo "kiln: fuzzing $$name for $(FUZZ_SECONDS) s"; \
	  (cd $(BUILD)-fuzz && ./$$name -max_total_time=$(FUZZ_SECONDS) -max_len=512 -print_final_stats=1 \
	    new-$$name $(CURDIR)/tests/fuzz/corpus/$${name#fuzz_} >$$name.log 2>&1); rc=$$?; \
	  grep -E "ERROR|runtime error|SUMMARY|Done|stat::number_of_executed_units" $(BUILD)-fuzz/$$name.log | head -8; \
	  if [ $$rc -ne 0 ]; then echo "kiln: $$name FAILED (see $(BUILD)-fuzz/$$name.log)"; exit 1; fi; \
	done

# Every benchmark against its peer (cuBLAS; PyTorch SDPA when python3 has torch): one summary table,
# $(BUILD)/bench/bench.json (logs and per-command JSON beside it), docs/perf.png (with matplotlib)
# and the generated section of docs/performance.md. KILN_BENCH_QUICK=1: fewer shapes (the
# benchmarks took 61 s on an H200, 2026-12-03, after the build). Without a GPU it stops after the first command and says so. bench-run: the same on
# an existing build (a build directory carried to the GPU machine).
BENCH_COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)

bench: build
	@$(MAKE) --no-print-directory bench-run

# bench_all.sh exits 1 when some commands failed (the report still shows the others' rows), 2 or
# 3 when nothing ran (bad build, no GPU).
bench-run:
	@rc=0; bash scripts/bench_all.sh $(BUILD) $(BUILD)/bench || rc=$$?; \
	if [ $$rc -ge 2 ]; then exit $$rc; fi; \
	python3 scripts/bench_report.py $(BUILD)/bench --docs docs/performance.md --chart docs/perf.png \
	  --json-copy docs/bench.json --commit $(BENCH_COMMIT) || exit 1; \
	if [ $$rc -ne 0 ]; then echo "kiln: make bench: some benchmarks failed (see above)"; fi; \
	exit $$rc

clean:
	rm -rf $(BUILD) $(BUILD)-asan
