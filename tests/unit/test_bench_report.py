"""bench/report.py: ratios, the Markdown table and the targets (pure)."""

from bench.report import markdown, ratios, targets


def row(system, workload, protocol, conc, rate, p50=1.0, p99=2.0, errors=0):
    return {"system": system, "workload": workload, "protocol": protocol, "concurrency": conc,
            "infer_per_s": rate, "p50_ms": p50, "p99_ms": p99, "errors": errors}


ROWS = [
    row("pyserver", "add_sub", "grpc", 1, 4000, 0.25, 0.5),
    row("pyserver", "add_sub", "grpc", 16, 9000, 1.7, 3.0),
    row("pyserver", "add_sub", "grpc", 128, 8000, 15.0, 20.0, errors=5),
    row("triton", "add_sub", "grpc", 16, 3000, 5.0, 7.5),
    row("mlserver", "add_sub", "grpc", 16, 450, 34.0, 54.0),
    row("pyserver", "add_sub_dyn", "grpc", 1, 3000, 0.36, 0.6),
]


def test_ratios_per_cell():
    by_key = {(r["workload"], r["protocol"], r["concurrency"]): r for r in ratios(ROWS)}
    c16 = by_key[("add_sub", "grpc", 16)]
    assert c16["pyserver_over_triton"] == 3.0
    assert c16["pyserver_over_mlserver"] == 20.0
    assert by_key[("add_sub", "grpc", 1)]["pyserver_over_triton"] is None


def test_markdown_table_has_cells_ratios_and_errors():
    text = markdown(ROWS, {"add_sub": "add_sub FP32[16]"})
    assert "### add_sub FP32[16]" in text
    assert "| pyserver/triton | pyserver/mlserver |" in text
    assert "| grpc | 16 | 9,000 (1.70/3.00) | 3,000 (5.00/7.50) | 450 (34.00/54.00) | 3.00× | 20.00× |" in text
    assert "**5 err**" in text
    assert "| grpc | 1 | 4,000 (0.25/0.50) | — | — | — | — |" in text


def test_targets():
    found = {t["target"]: t for t in targets(ROWS)}
    t = found["add_sub grpc c16 pyserver/triton ≥ 1.5×"]
    assert t["value"] == 3.0 and t["met"] is True
    assert found["add_sub grpc c16 pyserver/mlserver ≥ 10.0×"]["met"] is True
    collapse = found["add_sub grpc pyserver c128/peak ≥ 0.95"]
    assert collapse["value"] == 0.89 and collapse["met"] is False
    dyn = found["add_sub_dyn grpc c1 p50 added beyond the 100 µs delay < 20 µs"]
    assert dyn["value"] == 10 and dyn["met"] is True  # 0.36 - 0.25 - 0.1 ms


def test_cpu_table_at_c16():
    from bench.report import cpu_markdown

    rows = [dict(r, server_cpu_us_per_req=100.0 * (i + 1)) for i, r in enumerate(ROWS)]
    text = cpu_markdown(rows)
    assert "| workload | protocol | pyserver µs/req | triton µs/req | mlserver µs/req |" in text
    assert "| add_sub | grpc | 200 | 400 | 500 |" in text
    assert "add_sub_dyn" not in text  # only c1 there
    # the busiest thread's, where measured, in parentheses
    rows[1]["busiest_thread_us_per_req"] = 150.0
    assert "| add_sub | grpc | 200 (150) | 400 | 500 |" in cpu_markdown(rows)


def test_cpu_spent_sums_threads_and_names_the_busiest():
    import os

    from bench.systems import cpu_spent, thread_cpu

    before = {(1, "1"): 1.0, (1, "2"): 5.0, (2, "3"): 0.5}
    after = {(1, "1"): 1.25, (1, "2"): 5.5, (2, "3"): 0.5, (2, "4"): 0.125}  # one thread new
    assert cpu_spent(before, after) == (0.875, 0.5)
    assert cpu_spent({}, {}) == (0.0, 0.0)
    # a real snapshot: this process's threads, each counted once
    snap = thread_cpu([os.getpid()])
    assert snap and all(k[0] == os.getpid() for k in snap)
    total, busiest = cpu_spent(snap, thread_cpu([os.getpid()]))
    assert 0.0 <= busiest <= total
