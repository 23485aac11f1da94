"""Two pyserver trees, the same benchmark, alternated: the A/B figure a
change that must not cost speed needs (an architecture change, say).

  python bench/ab.py --baseline ../old-checkout --rounds 3 -- protocol.py --concurrency 16

Each round runs ``<tree>/bench/<script> <args>`` once for the baseline tree
and once for this one (in alternating order, round by round, so a slow
stretch of the machine hits both), each tree on its own ``PYTHONPATH`` with
its own copy of the script, both with this interpreter. The baseline must be
built (``make install`` there, or its compiled modules copied in). Every
row of the scripts' JSON output is matched by its non-numeric fields
(encoding, protocol, concurrency, ...) and each numeric field's new/old
ratio is printed: the median over the rounds, with the rounds' range.
Prints a JSON document of the same on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Fields that name a row rather than measure it.
IDENTITY = {"concurrency", "instances", "c", "size", "batch_size", "round"}


def run(tree: Path, script: str, args: list[str], timeout: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, str(tree / "bench" / script), *args], env=env,
                          cwd=tree, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"{tree}/bench/{script} failed ({done.returncode}):\n"
                         f"{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def rows(doc, path: str = "") -> dict:
    """{row key: {metric: value}} for every dict in the document that holds
    numbers, keyed by where it is and its naming fields."""
    out: dict = {}
    if isinstance(doc, dict):
        ident = [f"{k}={v}" for k, v in sorted(doc.items())
                 if isinstance(v, str) or (k in IDENTITY and isinstance(v, int))]
        metrics = {k: v for k, v in doc.items() if k not in IDENTITY
                   and isinstance(v, (int, float)) and not isinstance(v, bool)}
        key = (path + " " + ",".join(ident)).strip()
        if metrics:
            out[key] = metrics
        for k, v in doc.items():
            if isinstance(v, (dict, list)):
                out.update(rows(v, f"{key}/{k}" if key else k))
    elif isinstance(doc, list):
        for i, item in enumerate(doc):
            sub = rows(item, path)
            for k, v in sub.items():
                out[k if k not in out else f"{k}#{i}"] = v
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--baseline", required=True, type=Path, help="the other tree (built)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("script", help="a script in bench/ (e.g. protocol.py)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments (after --)")
    args = p.parse_args()
    extra = [a for a in args.args if a != "--"]
    trees = {"old": args.baseline.resolve(), "new": ROOT}
    results: dict = {"old": [], "new": []}
    for r in range(args.rounds):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        for name in order:
            results[name].append(rows(run(trees[name], args.script, extra, args.timeout)))
            print(f"round {r + 1}/{args.rounds}: {name} done", file=sys.stderr)
    table = []
    for key in results["new"][0]:
        for metric in results["new"][0][key]:
            ratios, olds, news = [], [], []
            for old, new in zip(results["old"], results["new"]):
                a = old.get(key, {}).get(metric)
                b = new.get(key, {}).get(metric)
                if a is None or b is None:
                    continue
                olds.append(a)
                news.append(b)
                if a:
                    ratios.append(b / a)
            if not ratios:
                continue
            table.append({"row": key, "metric": metric,
                          "old_median": statistics.median(olds),
                          "new_median": statistics.median(news),
                          "new_over_old": round(statistics.median(ratios), 3),
                          "range": [round(min(ratios), 3), round(max(ratios), 3)]})
    for t in table:
        print(f"{t['row'][:70]:<70} {t['metric']:<18} old {t['old_median']:>10} "
              f"new {t['new_median']:>10}  new/old {t['new_over_old']:.3f} "
              f"({t['range'][0]:.3f}-{t['range'][1]:.3f})", file=sys.stderr)
    print(json.dumps({"bench": "ab", "script": args.script, "args": extra,
                      "rounds": args.rounds, "rows": table}, indent=2))


if __name__ == "__main__":
    main()
