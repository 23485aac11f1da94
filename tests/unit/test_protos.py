"""Wire-compatibility checks for the .proto files under ``protos/``.

The protos are compiled with ``grpc_tools.protoc`` into a temporary
directory and compared, descriptor by descriptor, against the compiled
descriptors that ship inside ``tritonclient`` (the reference client we must
stay compatible with).

Direction of the comparison: everything tritonclient defines must exist in
our protos *identically* (names, numbers, types, repeated-ness, packing,
oneof membership, message/enum type names, enum values, RPC signatures).
Our protos may define more than tritonclient's pinned copy, but only the
additions listed in ``KNOWN_NEWER_UPSTREAM`` - items that exist in the
newest triton-inference-server/common protos and postdate the tritonclient
release installed here. Anything else extra is reported as a mismatch.

Our compiled modules are loaded into a private DescriptorPool (from a
``--descriptor_set_out`` file) because tritonclient already registers
``model_config.proto`` / ``grpc_service.proto`` in the default pool; the
generated ``*_pb2`` / ``*_pb2_grpc`` modules are imported in a subprocess for
the same reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("grpc_tools")
pytest.importorskip("tritonclient.grpc")

from google.protobuf import (  # noqa: E402
    descriptor_pb2,
    descriptor_pool,
    message_factory,  # noqa: E402
)

REPO_ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = REPO_ROOT / "protos"
PROTO_FILES = ("model_config.proto", "grpc_service.proto", "health.proto")

# Items present in the newest Triton common protos that an older pinned
# tritonclient may lack. Keyed by full name: messages, fields
# ("<message>.<field>"), enum values ("<enum>.<VALUE>") and RPC methods
# ("<service>.<method>").
KNOWN_NEWER_UPSTREAM = frozenset(
    {
        # model_config.proto
        "inference.ModelConfig.runtime",
        "inference.ModelConfig.model_metrics",
        "inference.ModelMetrics",
        "inference.ModelMetrics.MetricControl",
        "inference.ModelMetrics.MetricControl.MetricIdentifier",
        "inference.ModelMetrics.MetricControl.HistogramOptions",
        "inference.ModelInput.is_non_linear_format_io",
        "inference.ModelOutput.is_non_linear_format_io",
        "inference.ModelEnsembling.max_inflight_requests",
        # grpc_service.proto
        "inference.InferResponseStatistics",
        "inference.ModelStatistics.response_stats",
        "inference.ModelStatistics.ResponseStatsEntry",  # map entry of the above
    }
)


# ---------------------------------------------------------------------------
# Compilation fixtures
# ---------------------------------------------------------------------------


def _protoc(*args: str) -> None:
    from grpc_tools import protoc

    include = str(Path(protoc.__file__).parent / "_proto")
    argv = ["grpc_tools.protoc", f"-I{PROTO_DIR}", f"-I{include}", *args]
    rc = protoc.main(argv)
    assert rc == 0, f"protoc failed (rc={rc}): {' '.join(argv)}"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("protos_out")
    for name in PROTO_FILES:
        assert (PROTO_DIR / name).is_file(), f"missing {PROTO_DIR / name}"
    _protoc(
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        f"--descriptor_set_out={out / 'all.pb'}",
        "--include_imports",
        *PROTO_FILES,
    )
    return out


@pytest.fixture(scope="module")
def our_pool(compiled) -> descriptor_pool.DescriptorPool:
    fds = descriptor_pb2.FileDescriptorSet.FromString((compiled / "all.pb").read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for fdp in fds.file:
        pool.Add(fdp)
    return pool


@pytest.fixture(scope="module")
def triton_files():
    from tritonclient.grpc import model_config_pb2, service_pb2

    return {
        "model_config.proto": model_config_pb2.DESCRIPTOR,
        "grpc_service.proto": service_pb2.DESCRIPTOR,
    }


# ---------------------------------------------------------------------------
# Descriptor comparison helpers
# ---------------------------------------------------------------------------


def _syntax(file_desc) -> str:
    # FileDescriptor.syntax is gone in newer protobuf; read it from the proto form.
    fdp = descriptor_pb2.FileDescriptorProto()
    file_desc.CopyToProto(fdp)
    return fdp.syntax or "proto2"


def _type_name(field) -> str | None:
    if field.message_type is not None:
        return field.message_type.full_name
    if field.enum_type is not None:
        return field.enum_type.full_name
    return None


def _field_sig(field) -> dict:
    return {
        "name": field.name,
        "number": field.number,
        "type": field.type,
        "repeated": field.is_repeated,
        "required": field.is_required,
        "packed": field.is_packed,
        "type_name": _type_name(field),
        "oneof": field.containing_oneof.name if field.containing_oneof else None,
    }


class Comparer:
    def __init__(self, ours: descriptor_pool.DescriptorPool):
        self.ours = ours
        self.problems: list[str] = []
        self.counts = {"messages": 0, "fields": 0, "enums": 0, "enum_values": 0, "methods": 0}

    def _extra(self, full_name: str, what: str) -> None:
        if full_name not in KNOWN_NEWER_UPSTREAM:
            self.problems.append(f"{what} {full_name}: defined by us but not by tritonclient")

    def enum(self, ref) -> None:
        self.counts["enums"] += 1
        try:
            mine = self.ours.FindEnumTypeByName(ref.full_name)
        except KeyError:
            self.problems.append(f"enum {ref.full_name}: missing")
            return
        ref_vals = {v.name: v.number for v in ref.values}
        my_vals = {v.name: v.number for v in mine.values}
        for name, num in ref_vals.items():
            self.counts["enum_values"] += 1
            if name not in my_vals:
                self.problems.append(f"enum value {ref.full_name}.{name}: missing")
            elif my_vals[name] != num:
                self.problems.append(
                    f"enum value {ref.full_name}.{name}: number {my_vals[name]} != {num}"
                )
        for name in my_vals.keys() - ref_vals.keys():
            self._extra(f"{ref.full_name}.{name}", "enum value")

    def message(self, ref) -> None:
        self.counts["messages"] += 1
        try:
            mine = self.ours.FindMessageTypeByName(ref.full_name)
        except KeyError:
            self.problems.append(f"message {ref.full_name}: missing")
            return
        if mine.GetOptions().map_entry != ref.GetOptions().map_entry:
            self.problems.append(f"message {ref.full_name}: map_entry option differs")

        my_fields = {f.name: f for f in mine.fields}
        for rf in ref.fields:
            self.counts["fields"] += 1
            mf = my_fields.get(rf.name)
            if mf is None:
                self.problems.append(f"field {rf.full_name}: missing")
                continue
            want, got = _field_sig(rf), _field_sig(mf)
            diffs = [f"{k}: ours={got[k]!r} triton={want[k]!r}" for k in want if want[k] != got[k]]
            if diffs:
                self.problems.append(f"field {rf.full_name}: " + "; ".join(diffs))
        ref_names = {f.name for f in ref.fields}
        for name in my_fields.keys() - ref_names:
            self._extra(f"{ref.full_name}.{name}", "field")

        ref_oneofs = [o.name for o in ref.oneofs]
        my_oneofs = [o.name for o in mine.oneofs]
        for name in ref_oneofs:
            if name not in my_oneofs:
                self.problems.append(f"oneof {ref.full_name}.{name}: missing")

        for nested in ref.nested_types:
            self.message(nested)
        ref_nested = {n.full_name for n in ref.nested_types}
        for n in mine.nested_types:
            if n.full_name not in ref_nested:
                self._extra(n.full_name, "message")
        for e in ref.enum_types:
            self.enum(e)
        ref_enums = {e.full_name for e in ref.enum_types}
        for e in mine.enum_types:
            if e.full_name not in ref_enums:
                self._extra(e.full_name, "enum")

    def service(self, ref) -> None:
        try:
            mine = self.ours.FindServiceByName(ref.full_name)
        except KeyError:
            self.problems.append(f"service {ref.full_name}: missing")
            return
        my_methods = {m.name: m for m in mine.methods}
        for rm in ref.methods:
            self.counts["methods"] += 1
            mm = my_methods.get(rm.name)
            if mm is None:
                self.problems.append(f"rpc {rm.full_name}: missing")
                continue
            for attr in ("input_type", "output_type"):
                a, b = getattr(mm, attr).full_name, getattr(rm, attr).full_name
                if a != b:
                    self.problems.append(f"rpc {rm.full_name}: {attr} ours={a} triton={b}")
            for attr in ("client_streaming", "server_streaming"):
                a, b = getattr(mm, attr), getattr(rm, attr)
                if a != b:
                    self.problems.append(f"rpc {rm.full_name}: {attr} ours={a} triton={b}")
        for name in my_methods.keys() - {m.name for m in ref.methods}:
            self._extra(f"{ref.full_name}.{name}", "rpc")

    def file(self, ref_file, mine_file) -> None:
        if mine_file.package != ref_file.package:
            self.problems.append(
                f"file {ref_file.name}: package {mine_file.package!r} != {ref_file.package!r}"
            )
        mine_syntax, ref_syntax = _syntax(mine_file), _syntax(ref_file)
        if mine_syntax != ref_syntax:
            self.problems.append(f"file {ref_file.name}: syntax {mine_syntax!r} != {ref_syntax!r}")
        for m in ref_file.message_types_by_name.values():
            self.message(m)
        for e in ref_file.enum_types_by_name.values():
            self.enum(e)
        for s in ref_file.services_by_name.values():
            self.service(s)
        for name, m in mine_file.message_types_by_name.items():
            if name not in ref_file.message_types_by_name:
                self._extra(m.full_name, "message")
        for name, e in mine_file.enum_types_by_name.items():
            if name not in ref_file.enum_types_by_name:
                self._extra(e.full_name, "enum")
        for name, s in mine_file.services_by_name.items():
            if name not in ref_file.services_by_name:
                self._extra(s.full_name, "service")


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------


def test_matches_tritonclient_descriptors(our_pool, triton_files):
    cmp = Comparer(our_pool)
    for file_name, ref_file in triton_files.items():
        mine_file = our_pool.FindFileByName(file_name)
        cmp.file(ref_file, mine_file)
        # Dependencies must resolve the same way (grpc_service imports model_config).
        assert [d.name for d in mine_file.dependencies] == [
            d.name for d in ref_file.dependencies
        ], f"{file_name}: imports differ"

    # Sanity: make sure the walk actually covered the expected surface.
    assert cmp.counts["messages"] >= 100, cmp.counts
    assert cmp.counts["fields"] >= 300, cmp.counts
    assert cmp.counts["methods"] == 20, cmp.counts

    if cmp.problems:
        pytest.fail(
            f"{len(cmp.problems)} mismatch(es) between protos/ and tritonclient "
            f"(compared {cmp.counts}):\n  " + "\n  ".join(sorted(cmp.problems)),
            pytrace=False,
        )


def test_known_newer_upstream_items_are_defined(our_pool):
    """The allow-list must only name things our protos really define."""
    missing = []
    for full_name in sorted(KNOWN_NEWER_UPSTREAM):
        for finder in (our_pool.FindMessageTypeByName, our_pool.FindFieldByName):
            try:
                finder(full_name)
                break
            except KeyError:
                pass
        else:
            missing.append(full_name)
    assert not missing, f"allow-listed but not defined in protos/: {missing}"


def test_health_proto(our_pool):
    f = our_pool.FindFileByName("health.proto")
    assert f.package == "grpc.health.v1"

    req = our_pool.FindMessageTypeByName("grpc.health.v1.HealthCheckRequest")
    assert [(x.name, x.number, x.type) for x in req.fields] == [
        ("service", 1, req.fields[0].TYPE_STRING)
    ]

    resp = our_pool.FindMessageTypeByName("grpc.health.v1.HealthCheckResponse")
    status = resp.fields_by_name["status"]
    assert status.number == 1
    assert status.enum_type.full_name == "grpc.health.v1.HealthCheckResponse.ServingStatus"
    assert {v.name: v.number for v in status.enum_type.values} == {
        "UNKNOWN": 0,
        "SERVING": 1,
        "NOT_SERVING": 2,
        "SERVICE_UNKNOWN": 3,
    }

    svc = our_pool.FindServiceByName("grpc.health.v1.Health")
    sig = {
        m.name: (m.input_type.full_name, m.output_type.full_name, m.client_streaming, m.server_streaming)
        for m in svc.methods
    }
    assert sig == {
        "Check": ("grpc.health.v1.HealthCheckRequest", "grpc.health.v1.HealthCheckResponse", False, False),
        "Watch": ("grpc.health.v1.HealthCheckRequest", "grpc.health.v1.HealthCheckResponse", False, True),
    }


def test_wire_roundtrip_with_tritonclient(our_pool):
    """Bytes produced by tritonclient parse with our types and re-serialize identically."""
    from tritonclient.grpc import model_config_pb2 as tmc
    from tritonclient.grpc import service_pb2 as tsv

    cfg = tmc.ModelConfig(name="m", platform="onnxruntime_onnx", backend="onnxruntime", max_batch_size=8)
    inp = cfg.input.add(name="IN", data_type=tmc.TYPE_FP32, dims=[-1, 3])
    inp.format = tmc.ModelInput.FORMAT_NCHW
    cfg.output.add(name="OUT", data_type=tmc.TYPE_STRING, dims=[1], label_filename="labels.txt")
    cfg.instance_group.add(kind=tmc.ModelInstanceGroup.KIND_GPU, count=2, gpus=[0, 1])
    cfg.dynamic_batching.preferred_batch_size.extend([4, 8])
    cfg.dynamic_batching.max_queue_delay_microseconds = 100
    cfg.dynamic_batching.priority_queue_policy[1].max_queue_size = 7
    cfg.parameters["k"].string_value = "v"
    cfg.version_policy.specific.versions.extend([1, 3])
    cfg.optimization.cuda.graphs = True
    cfg.model_transaction_policy.decoupled = True

    req = tsv.ModelInferRequest(model_name="m", model_version="1", id="r1")
    req.parameters["sequence_id"].int64_param = 42
    t = req.inputs.add(name="IN", datatype="FP32", shape=[1, 3])
    t.contents.fp32_contents.extend([1.0, 2.0, 3.0])
    req.outputs.add(name="OUT").parameters["classification"].int64_param = 2
    req.raw_input_contents.append(b"\x00\x01\x02\x03")

    stats = tsv.ModelStatisticsResponse()
    s = stats.model_stats.add(name="m", version="1", inference_count=5)
    s.inference_stats.success.count = 5
    s.batch_stats.add(batch_size=4).compute_infer.ns = 1000
    s.memory_usage.add(type="GPU", id=0, byte_size=123)
    if "response_stats" in s.DESCRIPTOR.fields_by_name:  # newer tritonclient only
        s.response_stats["0"].success.count = 1

    for ref_msg in (cfg, req, stats):
        cls = message_factory.GetMessageClass(our_pool.FindMessageTypeByName(ref_msg.DESCRIPTOR.full_name))
        data = ref_msg.SerializeToString(deterministic=True)
        ours = cls.FromString(data)
        assert ours.SerializeToString(deterministic=True) == data, ref_msg.DESCRIPTOR.full_name
        # No field of the tritonclient message landed in our unknown-field set.
        from google.protobuf import unknown_fields

        assert len(unknown_fields.UnknownFieldSet(ours)) == 0, ref_msg.DESCRIPTOR.full_name


def test_generated_modules_import(compiled):
    """The protoc-generated *_pb2 / *_pb2_grpc modules import and expose the stubs.

    Run in a subprocess: tritonclient's copies of the same .proto file names
    already live in this process's default descriptor pool.
    """
    script = textwrap.dedent(
        """
        import grpc_service_pb2, grpc_service_pb2_grpc
        import model_config_pb2, health_pb2, health_pb2_grpc

        cfg = model_config_pb2.ModelConfig(name="x", max_batch_size=4)
        assert model_config_pb2.ModelConfig.FromString(cfg.SerializeToString()) == cfg
        r = grpc_service_pb2.ModelConfigResponse(config=cfg)
        assert r.config.name == "x"
        assert grpc_service_pb2.DESCRIPTOR.package == "inference"
        assert hasattr(grpc_service_pb2_grpc, "GRPCInferenceServiceStub")
        assert hasattr(grpc_service_pb2_grpc, "GRPCInferenceServiceServicer")
        assert hasattr(grpc_service_pb2_grpc, "add_GRPCInferenceServiceServicer_to_server")
        assert hasattr(health_pb2_grpc, "HealthStub")
        assert hasattr(health_pb2_grpc, "add_HealthServicer_to_server")
        assert health_pb2.HealthCheckResponse.SERVING == 1
        print("ok")
        """
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(compiled), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=compiled, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr
