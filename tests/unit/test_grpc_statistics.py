"""engine/protocol/grpc_statistics: the ModelStatisticsResponse written in
wire format from the statistics document must be the message the protobuf
library's ParseDict builds from it, whatever the document holds."""

import pytest
from google.protobuf import json_format

from pyserver._proto import message_class
from pyserver.engine.protocol.grpc_statistics import encode_model_statistics
from pyserver.engine.stats import ModelStats

Response = message_class("inference.ModelStatisticsResponse")


def reference(document: dict):
    return json_format.ParseDict(document, Response(), ignore_unknown_fields=True)


def duration(count, ns):
    return {"count": count, "ns": ns}


def model_document(stats: ModelStats, name="m", version="1", memory=()) -> dict:
    s = stats.snapshot()
    return {"name": name, "version": version, "last_inference": s["last_inference"],
            "inference_count": s["inference_count"], "execution_count": s["execution_count"],
            "inference_stats": s["inference_stats"], "response_stats": s["response_stats"],
            "batch_stats": s["batch_stats"], "memory_usage": list(memory)}


def test_a_decoupled_models_statistics_with_many_response_indices():
    stats = ModelStats()
    for index in range(3000):
        stats.record_response(index, ("success", "fail", "empty", "cancel")[index % 4],
                              1000 + index, 7 * index)
    stats.record_response(0, "success", 5, 5)
    document = {"model_stats": [model_document(stats, memory=[
        {"type": "CPU", "id": 0, "byte_size": 4096}])]}
    wire = encode_model_statistics(document)
    decoded = Response.FromString(wire)
    assert decoded == reference(document)
    assert len(wire) == reference(document).ByteSize()
    entries = decoded.model_stats[0].response_stats
    assert len(entries) == 3000
    assert entries["0"].success.count == 2 and entries["0"].compute_infer.ns == 1005
    assert entries["2999"].cancel.count == 1
    assert entries["2996"].success.count == 1
    assert entries["2996"].compute_output.ns == 7 * 2996


def test_every_kind_of_field_as_parse_dict_writes_it():
    document = {"model_stats": [
        {"name": "ünïcode", "version": "12", "last_inference": 1_733_000_000_000,
         "inference_count": 2**40, "execution_count": 0,
         "inference_stats": {"success": duration(3, 2**63 - 1), "fail": duration(0, 0),
                             "queue": duration(1, 0), "cache_miss": duration(0, 9)},
         "batch_stats": [{"batch_size": 8, "compute_input": duration(1, 2),
                          "compute_infer": duration(0, 0), "compute_output": duration(5, 6)},
                         {"batch_size": 0}],
         "memory_usage": [{"type": "GPU", "id": -1, "byte_size": 0},
                          {"type": "", "id": 3, "byte_size": 2**33}],
         "response_stats": {"0": {"success": duration(1, 1)}, "7": {}},
         "failure_reasons": {"BACKEND": 1},  # not in the message: ignored
         "pending_count": 4},
        {"name": "", "version": "", "inference_stats": {}},
        {},
    ]}
    decoded = Response.FromString(encode_model_statistics(document))
    assert decoded == reference(document)
    # A zero duration is still there (as Triton's frontend sets every one).
    assert decoded.model_stats[0].inference_stats.HasField("fail")
    assert not decoded.model_stats[0].inference_stats.HasField("compute_infer")
    assert decoded.model_stats[0].memory_usage[0].id == -1


def test_no_models():
    assert encode_model_statistics({"model_stats": []}) == b""
    assert Response.FromString(encode_model_statistics({})) == reference({})


@pytest.mark.parametrize("bad", [
    {"model_stats": [{"inference_count": -1}]},
    {"model_stats": [{"name": 5}]},
    {"model_stats": [{"response_stats": {"0": [1, 2]}}]},
])
def test_a_malformed_document_raises_instead_of_writing_garbage(bad):
    with pytest.raises((OverflowError, TypeError)):
        encode_model_statistics(bad)
