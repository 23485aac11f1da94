"""Request validation against a model's config: what ModelVersion.submit's
validation costs per request, for a plain model (fixed dims: the typed first stage
takes it) and for models it declines (variable-size dims, a reshape, an
optional input: the general walk with Triton's rules decides).

  python bench/validate.py [--number 20000] [--repeat 7]
  python bench/ab.py --baseline ../old -- validate.py   # against a tree before

Each case is the best of --repeat runs of --number calls. Prints JSON rows
{case, us}.
"""

from __future__ import annotations

import argparse
import json
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONFIG = """
name: "m"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_FP32 dims: [ 16 ] },
        { name: "B" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""
CASES = {
    "plain": (CONFIG, [16]),
    "variable dims": (CONFIG.replace("dims: [ 16 ] }", "dims: [ -1 ] }"), [16]),
    "reshape": (CONFIG.replace('name: "B" data_type: TYPE_FP32 dims: [ 16 ] }',
                               'name: "B" data_type: TYPE_FP32 dims: [ 16 ] '
                               'reshape: { shape: [ 4, 4 ] } }'), [16]),
    "optional input": (CONFIG.replace('name: "B" data_type: TYPE_FP32 dims: [ 16 ] }',
                                      'name: "B" data_type: TYPE_FP32 dims: [ 16 ] optional: true }'),
                       [16]),
}


def model(text):
    """A ModelVersion over ``text`` with no server (either tree's API)."""
    from pyserver.engine import CompletionQueue

    try:
        from pyserver.config import normalize, parse_config_text
        from pyserver.kernel.context import ServerContext
        from pyserver.model.version import ModelVersion
        where = ServerContext(CompletionQueue())
    except ImportError:  # the tree before the layers
        from pyserver.core.config import normalize, parse_config_text
        from pyserver.core.model import ModelVersion
        where = CompletionQueue()
    return ModelVersion("m", 1, normalize(parse_config_text(text), "m"), "/nonexistent/1", where)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--number", type=int, default=20000)
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args()
    import numpy as np

    from pyserver.engine.types import InferRequest, InferTensor

    rows = []
    for case, (text, dims) in CASES.items():
        mv = model(text)
        a = np.ones([2, *dims], np.float32)
        request = InferRequest("m", "", "", [InferTensor("A", "FP32", [2, *dims], a),
                                             InferTensor("B", "FP32", [2, *dims], a)], [], {})
        if hasattr(mv._path, "walk"):  # one validate, compiled
            validate = mv.validate
        else:  # the tree before: what ModelVersion.submit called
            def validate(request, check=mv._path.check, general=mv.validate):
                return check(request) or general(request)
        validate(request)  # valid, before it is timed
        us = min(timeit.repeat(lambda: validate(request), number=args.number,
                               repeat=args.repeat)) / args.number * 1e6
        rows.append({"case": case, "us": round(us, 3)})
        print(f"{case:<16} {us:6.2f} µs", file=sys.stderr)
    print(json.dumps({"bench": "validate", "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
