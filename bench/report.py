"""Results into ratios, targets and a Markdown table (pure functions: no
processes, no files; tests/unit/test_bench_report.py)."""

from __future__ import annotations

from collections import defaultdict

SYSTEMS = ("pyserver", "triton", "mlserver")


def index(rows: list[dict]) -> dict:
    """(workload, protocol, concurrency) -> {system: row}, in first-seen order."""
    table: dict = defaultdict(dict)
    for row in rows:
        table[(row["workload"], row["protocol"], row["concurrency"])][row["system"]] = row
    return table


def ratio(a: dict | None, b: dict | None) -> float | None:
    if not a or not b or not b.get("infer_per_s") or a.get("infer_per_s") is None:
        return None
    return round(a["infer_per_s"] / b["infer_per_s"], 2)


def ratios(rows: list[dict]) -> list[dict]:
    """pyserver/Triton and pyserver/MLServer (infer/s) for every cell both ran."""
    out = []
    for (workload, protocol, conc), by_system in index(rows).items():
        py = by_system.get("pyserver")
        out.append({"workload": workload, "protocol": protocol, "concurrency": conc,
                    "pyserver_over_triton": ratio(py, by_system.get("triton")),
                    "pyserver_over_mlserver": ratio(py, by_system.get("mlserver"))})
    return out


def _cell(row: dict | None) -> str:
    if row is None:
        return "—"
    if row.get("infer_per_s") is None:
        return "failed"
    text = f"{row['infer_per_s']:,.0f} ({_ms(row.get('p50_ms'))}/{_ms(row.get('p99_ms'))})"
    if row.get("errors"):
        text += f" **{row['errors']} err**"
    return text


def _ms(value) -> str:
    return "?" if value is None else f"{value:.2f}"


def _x(value) -> str:
    return "—" if value is None else f"{value:.2f}×"


def markdown(rows: list[dict], titles: dict | None = None, systems=SYSTEMS) -> str:
    """One table per workload: infer/s (p50/p99 ms) per system, and ratios."""
    titles = titles or {}
    by_workload: dict = defaultdict(list)
    for key, by_system in index(rows).items():
        by_workload[key[0]].append((key, by_system))
    present = [s for s in systems if any(r["system"] == s for r in rows)]
    parts = []
    for workload, cells in by_workload.items():
        parts.append(f"### {titles.get(workload, workload)}\n")
        head = ["protocol", "c"] + [f"{s} infer/s (p50/p99 ms)" for s in present]
        if "pyserver" in present:
            head += [f"pyserver/{s}" for s in present if s != "pyserver"]
        parts.append("| " + " | ".join(head) + " |")
        parts.append("|" + "---|" * len(head))
        for (_, protocol, conc), by_system in cells:
            line = [protocol, str(conc)] + [_cell(by_system.get(s)) for s in present]
            if "pyserver" in present:
                line += [_x(ratio(by_system.get("pyserver"), by_system.get(s)))
                         for s in present if s != "pyserver"]
            parts.append("| " + " | ".join(line) + " |")
        parts.append("")
    return "\n".join(parts)


def cpu_markdown(rows: list[dict], conc: int = 16, systems=SYSTEMS) -> str:
    """Server CPU per request (whole process group, µs) at one concurrency,
    with the busiest thread's in parentheses where measured: a system well
    under 2e6 µs / (infer/s) on 2 cores is waiting, not working."""
    present = [s for s in systems if any(r["system"] == s for r in rows)]
    lines = ["| workload | protocol | " + " | ".join(f"{s} µs/req" for s in present) + " |",
             "|" + "---|" * (2 + len(present))]
    for (workload, protocol, c), by_system in index(rows).items():
        if c != conc or not any(r.get("server_cpu_us_per_req") for r in by_system.values()):
            continue
        cells = []
        for s in present:
            row = by_system.get(s) or {}
            value, busiest = row.get("server_cpu_us_per_req"), row.get("busiest_thread_us_per_req")
            cells.append("—" if value is None else f"{value:,.0f}" if busiest is None
                         else f"{value:,.0f} ({busiest:,.0f})")
        lines.append(f"| {workload} | {protocol} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _get(rows, system, workload, protocol, conc):
    key = (system, workload, protocol, conc)
    for r in rows:
        if (r["system"], r["workload"], r["protocol"], r["concurrency"]) == key:
            return r
    return None


def targets(rows: list[dict], delay_ms: float = 0.1) -> list[dict]:
    """The issue's targets, evaluated (reported, never asserted)."""
    out = []

    def add(name, value, met, detail=""):
        out.append({"target": name, "value": value, "met": met, "detail": detail})

    for workload in ("add_sub", "add_sub_dyn"):
        for protocol in ("grpc", "http-json", "http-binary"):
            py = _get(rows, "pyserver", workload, protocol, 16)
            for peer, want in (("triton", 1.5), ("mlserver", 10.0)):
                r = ratio(py, _get(rows, peer, workload, protocol, 16))
                if r is None:
                    continue
                detail = ""
                p99_ok = True
                if peer == "triton":
                    other = _get(rows, peer, workload, protocol, 16)
                    p99_ok = (py.get("p99_ms") or 1e9) <= (other.get("p99_ms") or 0)
                    detail = f"p99 {_ms(py.get('p99_ms'))} vs {_ms(other.get('p99_ms'))} ms"
                add(f"{workload} {protocol} c16 pyserver/{peer} ≥ {want}×", r,
                    r >= want and p99_ok, detail)
    # no collapse: c128 >= 0.95 x own peak, per workload x protocol
    series: dict = defaultdict(dict)
    for r in rows:
        if r["system"] == "pyserver" and r.get("infer_per_s") is not None:
            series[(r["workload"], r["protocol"])][r["concurrency"]] = r["infer_per_s"]
    for (workload, protocol), by_c in series.items():
        if 128 in by_c and len(by_c) > 1:
            value = round(by_c[128] / max(by_c.values()), 2)
            add(f"{workload} {protocol} pyserver c128/peak ≥ 0.95", value, value >= 0.95)
    # dynamic batching at c1: p50 beyond the delay, against the same request unbatched
    for protocol in ("grpc", "http-json", "http-binary"):
        plain = _get(rows, "pyserver", "add_sub", protocol, 1)
        for workload, allowance, label in (("add_sub_dyn", delay_ms, "beyond the 100 µs delay"),
                                           ("add_sub_eager", 0.0, "in total (eager)")):
            batched = _get(rows, "pyserver", workload, protocol, 1)
            if plain and batched and plain.get("p50_ms") is not None and batched.get("p50_ms") is not None:
                added_us = round((batched["p50_ms"] - plain["p50_ms"] - allowance) * 1000)
                add(f"{workload} {protocol} c1 p50 added {label} < 20 µs", added_us, added_us < 20,
                    f"p50 {_ms(batched['p50_ms'])} vs {_ms(plain['p50_ms'])} ms unbatched")
        for peer in ("triton",):
            plain = _get(rows, peer, "add_sub", protocol, 1)
            batched = _get(rows, peer, "add_sub_dyn", protocol, 1)
            if plain and batched and plain.get("p50_ms") is not None and batched.get("p50_ms") is not None:
                added_us = round((batched["p50_ms"] - plain["p50_ms"] - delay_ms) * 1000)
                add(f"(reference) {peer} add_sub_dyn {protocol} c1 p50 added beyond the delay",
                    added_us, None)
    return out


def targets_markdown(items: list[dict]) -> str:
    lines = ["| target | measured | met |", "|---|---|---|"]
    for t in items:
        met = "—" if t["met"] is None else ("yes" if t["met"] else "**no**")
        value = t["value"]
        shown = f"{value:.2f}×" if isinstance(value, float) else f"{value} µs"
        if "c128/peak" in t["target"]:
            shown = f"{value:.2f}"
        lines.append(f"| {t['target']} | {shown}{' — ' + t['detail'] if t['detail'] else ''} | {met} |")
    return "\n".join(lines) + "\n"
