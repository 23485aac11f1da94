"""bench/loadgen.py: h2load and wrk output into numbers (no processes)."""

from bench.loadgen import grpc_errors, grpc_frame, parse_h2load, parse_h2load_log, percentile
from bench.wrk import parse_wrk

H2LOAD = """starting benchmark...
spawning thread #0: 16 total client(s). Timing-based test with 0s of warm-up time and 1s of main duration for each client.
Warm-up phase is over for thread #0.
Main benchmark duration is over for thread #0. Stopping all clients.
Stopped all clients for thread #0

finished in 1.01s, 2247.00 req/s, 488.96KB/s
requests: 2247 total, 2263 started, 2247 done, 2247 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 2247 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 488.96KB (500690) total, 7.27KB (7445) headers (space savings 95.81%), 419.12KB (429177) data
                     min         max         mean         sd        +/- sd
time for request:      510us     22.17ms      6.83ms      3.02ms    71.96%
"""

WRK = """Running 2s test @ http://127.0.0.1:8000/v2/models/add_sub/infer
  1 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     3.12ms    1.01ms  20.11ms   90.00%
    Req/Sec     5.12k   300.00     5.50k    80.00%
  Latency Distribution
     50%  812.00us
     75%    3.50ms
     90%    4.00ms
     99%    1.20s
  10240 requests in 2.00s, 2.00MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 7
Requests/sec:   5120.00
Transfer/sec:      1.00MB
"""


def test_parse_h2load_summary():
    r = parse_h2load(H2LOAD)
    assert r == {"infer_per_s": 2247.0, "requests": 2247, "h2_failed": 0, "data_bytes": 429177}


def test_grpc_errors_from_missing_data_bytes():
    r = parse_h2load(H2LOAD)
    assert grpc_errors(r, 191) == 0  # 429177 = 2247 x 191: every call answered
    r["data_bytes"] = 191 * 2000  # 247 calls ended with a grpc-status and no DATA
    assert grpc_errors(r, 191) == 247
    r["h2_failed"] = 3
    assert grpc_errors(r, 191) == 3 + 244
    assert grpc_errors(r, 0) == r["requests"]  # not even one good answer
    assert grpc_errors(r, None) == 3  # size unknown: only what h2load saw


def test_h2load_log_percentiles():
    lines = "".join(f"1700000000{i:06d}\t200\t{us}\n" for i, us in enumerate(range(1000, 101000, 1000)))
    assert parse_h2load_log(lines) == {"p50_ms": 50.0, "p99_ms": 99.0}
    assert parse_h2load_log("") == {"p50_ms": None, "p99_ms": None}


def test_percentile_nearest_rank():
    assert percentile([], 50) is None
    assert percentile([7], 99) == 7
    assert percentile([1, 2, 3, 4], 50) == 2
    assert percentile(list(range(1, 101)), 99) == 99


def test_parse_wrk_units_and_errors():
    r = parse_wrk(WRK)
    assert r["infer_per_s"] == 5120.0
    assert r["p50_ms"] == 0.812 and r["p99_ms"] == 1200.0
    assert r["non_2xx"] == 7 and r["socket_errors"] == 3


def test_grpc_frame_prefix():
    assert grpc_frame(b"abc") == b"\x00\x00\x00\x00\x03abc"


def test_only_successes_counts_good_answers():
    from bench.loadgen import only_successes

    r = only_successes({"infer_per_s": 1000.0, "requests": 2000}, 500)
    assert r["infer_per_s"] == 750.0 and r["requests_per_s"] == 1000.0
    assert only_successes({"infer_per_s": 10.0, "requests": 20}, 0)["infer_per_s"] == 10.0
