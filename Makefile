# pyserver: `make serve` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CSRC_TEST_DIR := build/csrc-tests
GTEST_HEADER := /usr/include/gtest/gtest.h
NGHTTP2_HEADER := /usr/include/nghttp2/nghttp2.h
XXHASH_HEADER := /usr/include/xxhash.h
FMT_HEADER := /usr/include/fmt/format.h
SIMDJSON_HEADER := /usr/include/simdjson.h
# llhttp's C sources (the HTTP/1.1 parser) from Debian's node-llhttp,
# unpacked into build/ (installing the package would pull in Node.js).
LLHTTP_DIR := build/llhttp
LLHTTP_SOURCE := $(LLHTTP_DIR)/usr/share/llhttp/llhttp.c
# perf_analyzer (shipped in tritonclient's wheel) links libb64 from Debian.
LIBB64 := /usr/lib/$(shell uname -m)-linux-gnu/libb64.so.0d
# jemalloc, the server's malloc where the machine has it (pyserver/runtime/allocator.py).
JEMALLOC := /usr/lib/$(shell uname -m)-linux-gnu/libjemalloc.so.2

.PHONY: install serve test test-csrc test-embed test-python test-ray test-gpu lint sanitize sanitize-python bench clean system-deps

# `$(call apt_need,FILE,PACKAGE)`: installs Debian's PACKAGE when FILE is missing.
define apt_need
@if [ ! -f $(1) ]; then \
  echo "installing $(2)"; \
  SUDO=""; [ "$$(id -u)" -ne 0 ] && SUDO=sudo; \
  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(2) >/dev/null; \
fi
endef

# Debian packages: GoogleTest for the csrc tests, nghttp2 for the gRPC
# frontend's HTTP/2, llhttp for the HTTP frontend's HTTP/1.1, xxHash for the
# response cache, {fmt} and simdjson for the HTTP infer JSON, libb64 for
# perf_analyzer, jemalloc for the server's malloc (pyserver/runtime/allocator.py;
# each installed when missing).
system-deps:
	$(call apt_need,$(GTEST_HEADER),libgtest-dev)
	$(call apt_need,$(NGHTTP2_HEADER),libnghttp2-dev)
	$(call apt_need,$(LIBB64),libb64-0d)
	@if [ ! -f $(LLHTTP_SOURCE) ]; then \
	  echo "unpacking node-llhttp (llhttp's C sources) into $(LLHTTP_DIR)"; \
	  rm -rf $(LLHTTP_DIR) && mkdir -p $(LLHTTP_DIR) && \
	  (cd $(LLHTTP_DIR) && (apt-get download node-llhttp >/dev/null 2>&1 || \
	    { SUDO=""; [ "$$(id -u)" -ne 0 ] && SUDO=sudo; $$SUDO apt-get update -qq && apt-get download node-llhttp >/dev/null; }) && \
	   dpkg -x node-llhttp_*.deb . && rm -f node-llhttp_*.deb); \
	fi
	$(call apt_need,$(XXHASH_HEADER),libxxhash-dev)
	$(call apt_need,$(FMT_HEADER),libfmt-dev)
	$(call apt_need,$(SIMDJSON_HEADER),libsimdjson-dev)
	$(call apt_need,$(JEMALLOC),libjemalloc2)

$(VENV)/.deps: pyproject.toml requirements-test.txt requirements-storage.txt requirements-deploy.txt
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q setuptools wheel "cython>=3.0" "cmake>=3.18" ninja numpy grpcio-tools pybind11
	$(VPY) -m pip install -q -r requirements-test.txt
	touch $@

# Builds csrc + engine (incremental: build/ persists) and installs editable.
# The tritonserver shim (Triton's in-process API's import name) goes in too:
# the tests import it.
install: system-deps $(VENV)/.deps
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VPY) -m pip install -q --no-build-isolation --no-deps -e .
	$(VPY) -m pip install -q --no-build-isolation --no-deps -e shims/tritonserver

serve: install
	$(VPY) -m pyserver --model-repository examples/model_repository

test-csrc: system-deps $(VENV)/.deps
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH cmake -S . -B $(CSRC_TEST_DIR) -G Ninja -DPYSERVER_BUILD_PYTHON=OFF -DPYSERVER_BUILD_TESTS=ON >/dev/null
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH cmake --build $(CSRC_TEST_DIR) -j $(JOBS)
	$(CSRC_TEST_DIR)/csrc_tests --gtest_brief=1

# The C++ embedding API (embed/): a C++ program starts pyserver in-process.
EMBED_DIR := build/embed
test-embed: install
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH cmake -S . -B $(EMBED_DIR) -G Ninja -DPYSERVER_BUILD_PYTHON=OFF -DPYSERVER_BUILD_EMBED=ON \
	  -DPython_EXECUTABLE=$(CURDIR)/$(VPY) -Dpybind11_DIR=$$($(VPY) -m pybind11 --cmakedir) >/dev/null
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH cmake --build $(EMBED_DIR) -j $(JOBS) --target embed_tests
	rm -rf $(EMBED_DIR)/repo && $(VPY) -c "from pyserver.testing import write_add_sub; write_add_sub('$(EMBED_DIR)/repo', extra='dynamic_batching { }')"
	PYTHONPATH=$(CURDIR):$$($(VPY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") \
	  PYSERVER_EMBED_REPO=$(CURDIR)/$(EMBED_DIR)/repo $(EMBED_DIR)/embed_tests --gtest_brief=1

test-python: install
	$(VPY) -m pytest -q tests --ignore=tests/rayserve

# pyserver on Ray Serve (tests/rayserve: a two-node local Ray cluster), apart
# from test-python for its time; .ci/run runs it after `make test`.
$(VENV)/.deps-ray: requirements-ray.txt $(VENV)/.deps
	$(VPY) -m pip install -q -r requirements-ray.txt
	touch $@

test-ray: install $(VENV)/.deps-ray
	$(VPY) -m pytest -q tests/rayserve

# GPU tests (TensorRT plans, ONNX Runtime CUDA/TensorRT EPs, torch on CUDA);
# each module skips with its reason where its runtime is missing, and fails
# where the machine has a GPU the CUDA runtime cannot use. On a GPU machine:
# .venv/bin/pip install tensorrt cupy-cuda12x, `.venv/bin/pip uninstall -y
# onnxruntime` then `.venv/bin/pip install onnxruntime-gpu` (the two share one
# package folder: installed over each other the CUDA provider can go
# missing), and a CUDA build of torch, for every test to run (CuPy: CUDA
# shared memory).
test-gpu: install
	$(VPY) -m pytest -q -rs tests/gpu

# ruff, then the architecture: the layers, the forbidden imports and no
# import circles (.importlinter; docs/ARCHITECTURE.md explains them).
lint: $(VENV)/.deps
	$(VENV)/bin/ruff check pyserver tests bench shims
	$(VENV)/bin/lint-imports --no-cache

test: install lint test-csrc test-embed test-python

# csrc tests under ASan+UBSan, then TSan, then the Python suite over an
# ASan+UBSan build of the engine.
sanitize: system-deps $(VENV)/.deps
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH cmake -S . -B build/asan -G Ninja -DPYSERVER_BUILD_PYTHON=OFF -DPYSERVER_BUILD_TESTS=ON -DPYSERVER_SANITIZE=address -DCMAKE_BUILD_TYPE=Debug >/dev/null
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH cmake --build build/asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 build/asan/csrc_tests --gtest_brief=1
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH cmake -S . -B build/tsan -G Ninja -DPYSERVER_BUILD_PYTHON=OFF -DPYSERVER_BUILD_TESTS=ON -DPYSERVER_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug >/dev/null
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH cmake --build build/tsan -j $(JOBS)
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 setarch $$(uname -m) -R build/tsan/csrc_tests --gtest_brief=1
	$(MAKE) --no-print-directory sanitize-python

# The whole pytest suite over csrc and the Cython modules built with
# ASan+UBSan (pyserver.engine searches PYSERVER_ENGINE_DIR first). Python
# objects go through malloc, so a reference dropped twice by the engine shows
# as a double free. The interpreter is not instrumented, hence the preload;
# leaks are not checked (the interpreter keeps much alive at exit), and
# SIGSEGV is left to the default action (a test kills a worker with it).
ASAN_PY_DIR := build/asan-py
sanitize-python: install
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH cmake -S . -B $(ASAN_PY_DIR) -G Ninja -DPYSERVER_SANITIZE=address -DCMAKE_BUILD_TYPE=Debug \
	  -DPython_EXECUTABLE=$(CURDIR)/$(VPY) -DPYSERVER_ENGINE_DIR=$(CURDIR)/$(ASAN_PY_DIR)/engine >/dev/null
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH cmake --build $(ASAN_PY_DIR) -j $(JOBS)
	PYSERVER_ENGINE_DIR=$(CURDIR)/$(ASAN_PY_DIR)/engine PYTHONMALLOC=malloc \
	  LD_PRELOAD="$$($(CXX) -print-file-name=libasan.so) $$($(CXX) -print-file-name=libubsan.so)" \
	  ASAN_OPTIONS=detect_leaks=0:alloc_dealloc_mismatch=0:handle_segv=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  $(VPY) -m pytest -q -p no:cacheprovider tests --ignore=tests/rayserve

# The side-by-side suite (pyserver, Triton from nvidia-pytriton, MLServer):
# load generators in C (wrk for HTTP, h2load for gRPC) come from Debian, the
# peers and matplotlib go into bench/.venvs/ on the first run; results in
# bench/results/. `make bench BENCH_ARGS=--quick` for the short subset. The
# single-part scripts (bench/*.py) run on their own.
# The peers' venvs fill in the background while pyserver builds (python -m
# bench retries any that failed).
bench:
	@command -v wrk >/dev/null && command -v h2load >/dev/null || { SUDO=""; [ "$$(id -u)" -ne 0 ] && SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq wrk nghttp2-client >/dev/null; }
	@$(PYTHON) -m bench.systems & peers=$$!; $(MAKE) --no-print-directory install; rc=$$?; \
	  wait $$peers; exit $$rc
	$(VPY) -m bench $(BENCH_ARGS)

clean:
	rm -rf build pyserver/engine/*.so pyserver/engine/protocol/*.so pyserver/_proto/*.desc

# Targets of one concern each (the container image, ...): mk/*.mk.
-include mk/*.mk
