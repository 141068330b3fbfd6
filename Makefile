# weir: `make run` and `make test` work on a fresh machine (as root).
BUILD      ?= build
BUILD_TYPE ?= Release
JOBS       ?= $(shell nproc)
PROMPT     ?= The capital of France is
MODEL      ?= $(or $(WEIR_MODELS),$(HOME)/.cache/weir)/gemma-3-270m-q4_k_m.gguf

.PHONY: all setup build model run test unit-test fuzz tsan clean

all: build

setup:
	@scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

model: setup
	@scripts/fetch-model.sh >/dev/null

run: build model
	$(BUILD)/weir run -m $(MODEL) -p "$(PROMPT)" -n 64

unit-test: build model
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

fuzz: setup
	@scripts/fuzz.sh 60

tsan: setup
	@scripts/tsan.sh

test: unit-test fuzz tsan

clean:
	rm -rf $(BUILD) build-fuzz build-tsan
