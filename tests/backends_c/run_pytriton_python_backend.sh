#!/bin/sh
# By-hand check (issue #25): Triton's own Python backend, the libtriton_python.so
# and triton_python_backend_stub inside the nvidia-pytriton wheel, served by
# pyserver through its C backend API: tests/models/python/add_sub with dynamic
# batching and two instances, 64 concurrent requests over HTTP and gRPC, every
# answer checked. Exits non-zero on a wrong answer or a failed load.
# Usage: run_pytriton_python_backend.sh [WORKDIR]
# Needs bench/.venvs/triton (`python -m bench.systems` makes it) and the system's
# libpython3.11, which the stub embeds. Layout it builds in WORKDIR:
#   libs/       the wheel's libraries, and pyserver's libtritonserver.so under the
#               name the backend links (libtritonserver-<hash>.so): LD_LIBRARY_PATH
#   repo/add_sub/  the model: the library, stub and utils in its folder (Triton's
#               first search place; pyserver's own Python backend would win over
#               BACKEND_DIR/python), and so model.py beside them too, where the
#               backend then looks (its python-based-backend mode), and numpy 1.x:
#               the stub's pybind11 predates numpy 2 (with numpy 2 the model saw
#               each input as its first element repeated, and outputs of 0 bytes)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
site=$(ls -d "$root"/bench/.venvs/triton/lib/python3*/site-packages)
wheel=$site/pytriton/tritonserver/backends/python
work=${1:-$(mktemp -d)}
model=$work/repo/add_sub
mkdir -p "$work/libs" "$model/1" "$work/backends"
for lib in "$site"/nvidia_pytriton.libs/*; do
  case $(basename "$lib") in
    libtritonserver-*) ln -sf "$root/pyserver/engine/libtritonserver.so" "$work/libs/$(basename "$lib")" ;;
    *) ln -sf "$lib" "$work/libs/" ;;
  esac
done
cp "$wheel/libtriton_python.so" "$wheel/triton_python_backend_stub" \
  "$wheel/triton_python_backend_utils.py" "$model/"
ln -sf "$site/numpy" "$site/numpy.libs" "$model/"
cp "$root/tests/models/python/add_sub/1/model.py" "$model/"  # 1/ stays empty: unread in this mode
cat > "$model/config.pbtxt" <<'EOF'
name: "add_sub"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
EOF
cd "$root"
LD_LIBRARY_PATH=$work/libs .venv/bin/python -m pyserver --model-repository "$work/repo" \
  --backend-directory "$work/backends" --http-port 18600 --grpc-port 18601 \
  --metrics-port 18602 > "$work/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
.venv/bin/python - <<'EOF'
import json, time, urllib.request
from concurrent.futures import ThreadPoolExecutor
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

for _ in range(300):
    try:
        if urllib.request.urlopen("http://127.0.0.1:18600/v2/models/add_sub/ready").status == 200:
            break
    except OSError:
        pass
    time.sleep(0.1)
else:
    raise SystemExit("add_sub did not become ready (see server.log)")

def one(i):
    mod, url = (grpcclient, "127.0.0.1:18601") if i % 2 else (httpclient, "127.0.0.1:18600")
    a = np.arange(4, dtype=np.float32)[None] + i
    b = np.full((1, 4), 10 * i, dtype=np.float32)
    inputs = [mod.InferInput("INPUT0", [1, 4], "FP32"), mod.InferInput("INPUT1", [1, 4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    r = mod.InferenceServerClient(url).infer("add_sub", inputs)
    return np.array_equal(r.as_numpy("OUTPUT0"), a + b) and np.array_equal(r.as_numpy("OUTPUT1"), a - b)

with ThreadPoolExecutor(16) as pool:
    right = sum(pool.map(one, range(64)))
stats = json.load(urllib.request.urlopen("http://127.0.0.1:18600/v2/models/add_sub/stats"))
s = stats["model_stats"][0]
print(f"{right} of 64 right; {s['inference_count']} inferences in {s['execution_count']} batches")
raise SystemExit(0 if right == 64 else 1)
EOF
