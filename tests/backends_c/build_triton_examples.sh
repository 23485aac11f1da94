#!/bin/sh
# By-hand check: builds Triton's example backends (minimal, recommended) from
# the backend repository's sources against pyserver's tritonbackend.h, into
# OUT/NAME/libtriton_NAME.so (a --backend-directory).
# Usage: build_triton_examples.sh BACKEND_SRC COMMON_SRC OUT
# (BACKEND_SRC: a checkout of triton-inference-server/backend; COMMON_SRC: of
# triton-inference-server/common; needs rapidjson-dev and g++.)
set -eu
backend=$1 common=$2 out=$3
root=$(cd "$(dirname "$0")/../.." && pwd)
for name in minimal recommended; do
  mkdir -p "$out/$name"
  g++ -std=c++17 -O1 -shared -fPIC -I"$root/csrc/include/pyserver/triton" \
    -I"$backend/include" -I"$common/include" \
    "$backend/examples/backends/$name/src/$name.cc" \
    "$backend"/src/backend_common.cc "$backend"/src/backend_input_collector.cc \
    "$backend"/src/backend_memory.cc "$backend"/src/backend_model.cc \
    "$backend"/src/backend_model_instance.cc "$backend"/src/backend_output_responder.cc \
    "$common"/src/async_work_queue.cc "$common"/src/thread_pool.cc "$common"/src/error.cc \
    -o "$out/$name/libtriton_$name.so" -L"$root/pyserver/engine" -ltritonserver -lpthread
done
