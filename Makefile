# weir: `make run` and `make test` work on a fresh machine (as root).
BUILD      ?= build
BUILD_TYPE ?= Release
JOBS       ?= $(shell nproc)
PROMPT     ?= The capital of France is
MODEL      ?= $(or $(WEIR_MODELS),$(HOME)/.cache/weir)/gemma-3-270m-q4_k_m.gguf

# WEIR_CUDA: AUTO (the CMake default: the CUDA backend only where nvidia-smi
# shows a GPU, for its architecture), ON or OFF. `make test` asks for ON, so
# a change that breaks the CUDA code cannot land; the choice stays in the
# build folder's cache until given again.
CUDA_FLAG = $(if $(WEIR_CUDA),-DWEIR_CUDA=$(WEIR_CUDA))

.PHONY: all setup configure build weir-binary model run test unit-test fuzz tsan clean

all: build

setup:
	@scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CUDA_FLAG) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The command alone (no tests): what `make run` needs.
weir-binary: configure
	@cmake --build $(BUILD) -j $(JOBS) --target weir

model: setup
	@scripts/fetch-model.sh >/dev/null

run: weir-binary model
	$(BUILD)/weir run -m $(MODEL) -p "$(PROMPT)" -n 64

unit-test: WEIR_CUDA ?= ON
unit-test: build model
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

fuzz: setup
	@scripts/fuzz.sh 60

tsan: setup
	@scripts/tsan.sh

test: unit-test fuzz tsan

clean:
	rm -rf $(BUILD) build-fuzz build-tsan
