# kiln — the two commands of the quick start, and a few more.
#   make run    build, then run the demo (GPU if there is one, else CPU, and it says which)
#   make test   build, then run every test (GPU tests are skipped, visibly, without a GPU)
#   make bench  build, then run the benchmarks against cuBLAS (needs a GPU)
# Missing Debian packages are installed first when run as root.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build run test test-asan bench clean

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
test: build test-asan
	cd $(BUILD) && ctest --output-on-failure

test-asan: deps
	cmake -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=Debug -DKILN_WITH_CUDA=OFF -DKILN_SANITIZE=ON -DKILN_BUILD_TOOLS=OFF
	cmake --build $(BUILD)-asan -j$(JOBS)
	cd $(BUILD)-asan && ASAN_OPTIONS=detect_leaks=1 ctest -L host --output-on-failure

bench: build
	./$(BUILD)/tools/kiln-bench copy
	./$(BUILD)/tools/kiln-bench matmul --json $(BUILD)/bench-matmul.json

clean:
	rm -rf $(BUILD) $(BUILD)-asan
