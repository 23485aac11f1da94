"""Plots for one suite result: per workload, infer/s, p50 and p99 against
concurrency, one line per system, one column per protocol.

  bench/.venvs/plot/bin/python bench/plot.py bench/results/<time>.json

Runs in the plot venv (matplotlib stays out of the main one); prints the PNG
paths it wrote. Reads only the JSON, so it imports nothing from bench/.
"""

import json
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"pyserver": "tab:blue", "triton": "tab:green", "mlserver": "tab:red"}
METRICS = (("infer_per_s", "infer/s"), ("p50_ms", "p50 (ms)"), ("p99_ms", "p99 (ms)"))


def main(path: str) -> None:
    src = Path(path)
    results = json.loads(src.read_text())
    series = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for row in results["rows"]:
        if not row.get("infer_per_s") or row["protocol"].startswith("aio-"):
            continue  # failed rows; aio rows are low-concurrency points, in the table
        series[row["workload"]][row["protocol"]][row["system"]].append(row)
    for workload, by_protocol in series.items():
        protocols = list(by_protocol)
        fig, axes = plt.subplots(len(METRICS), len(protocols), squeeze=False,
                                 figsize=(4.2 * len(protocols), 8.5))
        for col, protocol in enumerate(protocols):
            for row_i, (key, label) in enumerate(METRICS):
                ax = axes[row_i][col]
                for system, rows in by_protocol[protocol].items():
                    rows = sorted(rows, key=lambda r: r["concurrency"])
                    pts = [(r["concurrency"], r[key]) for r in rows if r.get(key) is not None]
                    if pts:
                        ax.plot(*zip(*pts), marker="o", label=system, color=COLORS.get(system))
                ax.set_xscale("log", base=2)
                concs = sorted({r["concurrency"] for rows in by_protocol[protocol].values() for r in rows})
                ax.set_xticks(concs, [str(c) for c in concs])
                if key != "infer_per_s":
                    ax.set_yscale("log")
                ax.set_ylabel(label)
                ax.grid(True, which="both", alpha=0.3)
                if row_i == 0:
                    ax.set_title(protocol)
                if row_i == len(METRICS) - 1:
                    ax.set_xlabel("concurrency")
        axes[0][0].legend(loc="best", fontsize="small")
        fig.suptitle(f"{results.get('titles', {}).get(workload, workload)} — "
                     f"{results['meta']['started']}", fontsize=10)
        fig.tight_layout()
        out = src.with_name(f"{src.stem}-{workload}.png")
        fig.savefig(out, dpi=90)
        plt.close(fig)
        print(out)


if __name__ == "__main__":
    main(sys.argv[1])
