#!/bin/sh
# By-hand check: builds Triton's example backends (minimal, recommended, bls) from
# the backend repository's sources against pyserver's tritonbackend.h, into
# OUT/NAME/libtriton_NAME.so (a --backend-directory), and its two custom
# batching strategies into OUT/strategies/{volume,single}_batching.so (a
# model's TRITON_BATCH_STRATEGY_PATH, or its batchstrategy.so).
# and, given IDENTITY_SRC (triton-inference-server/identity_backend), its
# identity backend (with its custom metrics).
# Usage: build_triton_examples.sh BACKEND_SRC COMMON_SRC OUT [IDENTITY_SRC]
# (BACKEND_SRC: a checkout of triton-inference-server/backend; COMMON_SRC: of
# triton-inference-server/common; needs rapidjson-dev and g++.)
set -eu
backend=$1 common=$2 out=$3 identity=${4:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
build() {  # NAME SOURCE [FLAGS]
  name=$1 source=$2
  shift 2
  mkdir -p "$out/$name"
  g++ -std=c++17 -O1 -shared -fPIC "$@" -I"$root/csrc/include/pyserver/triton" \
    -I"$backend/include" -I"$common/include" "$source" \
    "$backend"/src/backend_common.cc "$backend"/src/backend_input_collector.cc \
    "$backend"/src/backend_memory.cc "$backend"/src/backend_model.cc \
    "$backend"/src/backend_model_instance.cc "$backend"/src/backend_output_responder.cc \
    "$common"/src/async_work_queue.cc "$common"/src/thread_pool.cc "$common"/src/error.cc \
    -o "$out/$name/libtriton_$name.so" -L"$root/pyserver/engine" -ltritonserver -lpthread
}
for name in minimal recommended; do
  build $name "$backend/examples/backends/$name/src/$name.cc"
done
# bls: serve it with examples/model_repos/bls_models (mkdir bls_fp32/1 first)
bls=$backend/examples/backends/bls/src
build bls "$bls/backend.cc" "$bls/bls.cc" "$bls/bls_utils.cc"
if [ -n "$identity" ]; then
  build identity "$identity/src/identity.cc" -DTRITON_ENABLE_METRICS=1
fi
mkdir -p "$out/strategies"
for name in volume_batching single_batching; do
  g++ -std=c++17 -O1 -shared -fPIC -I"$root/csrc/include/pyserver/triton" -I"$common/include" \
    "$backend/examples/batching_strategies/$name/src/$name.cc" \
    -o "$out/strategies/$name.so" -L"$root/pyserver/engine" -ltritonserver
done
