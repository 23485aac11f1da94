#!/bin/sh
# By-hand check: Triton's own in-process C API examples, src/simple.cc (one
# server, its metadata, three inferences of the INT32 "simple" model) and
# src/multi_server.cc (servers created, used and deleted from several threads
# at once, explicit model control), built from the server repository's
# sources unchanged against pyserver's tritonserver.h, linked with
# pyserver's libtritonserver.so, and run.
# Usage: run_triton_examples.sh SERVER_SRC OUT
# (SERVER_SRC: a checkout of triton-inference-server/server; needs g++,
# rapidjson-dev and libb64-dev; `make install` first.)
set -eu
server=$1 out=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
engine="$root/pyserver/engine"
mkdir -p "$out"
for name in simple multi_server; do
  g++ -std=c++17 -O1 -I"$root/csrc/include/pyserver/triton" -I"$server/src" \
    "$server/src/$name.cc" "$server/src/common.cc" -o "$out/$name" \
    -L"$engine" -ltritonserver -lb64 -Wl,-rpath,"$engine" -pthread
done
# simple: Triton's example model repository's INT32 add/sub model.
mkdir -p "$out/simple_repo"
cp -r "$server/docs/examples/model_repository/simple" "$out/simple_repo/"
"$out/simple" -r "$out/simple_repo"
echo "simple: exit $?"
# multi_server: FP32 models only; simple1 shared, simple2 and simple3 one per thread.
"$root/.venv/bin/python" - "$out/multi" <<'PY'
import sys
from pyserver.testing import write_add_sub
for repo, name in (("common", "simple1"), ("r1", "simple2"), ("r2", "simple3")):
    write_add_sub(f"{sys.argv[1]}/{repo}", name=name)
PY
"$out/multi_server" -r "$out/multi/common" -r "$out/multi/r1" -r "$out/multi/r2" -t 2 -l 3
echo "multi_server: exit $?"
