# cython: language_level=3
"""inference.ModelStatisticsResponse written in protobuf's wire format
straight from the statistics extension's document (``Server.statistics``).

A decoupled model's statistics hold one ``response_stats`` entry per
response index, so a model that streams 10,000 responses to a request (an
LLM's tokens) has 10,000 of them. Through the protobuf library's
``json_format.ParseDict`` each cost ~85 µs of the event loop: 0.85 s for
every ModelStatistics call, which perf_analyzer makes each measurement
window, while no other connection was served. Written here, ~1 µs each.

The message is the one ``ParseDict(document, ModelStatisticsResponse())``
builds: a field whose key is in the document is written (a statistic's
duration even when it is zero, as Triton's frontend sets every one), a
scalar that is zero or an empty string is left out (proto3), and keys the
message does not have are ignored.
"""
from libc.stdint cimport int64_t, uint64_t
from libcpp.string cimport string

from cpython.bytes cimport PyBytes_FromStringAndSize


cdef enum:
    VARINT = 0
    LENGTH_DELIMITED = 2


cdef inline void _varint(string& out, uint64_t v) noexcept:
    while v >= 0x80:
        out.push_back(<char>((v & 0x7F) | 0x80))
        v >>= 7
    out.push_back(<char>v)


cdef inline void _tag(string& out, int field, int wire_type) noexcept:
    _varint(out, (<uint64_t>field << 3) | wire_type)


cdef inline void _message(string& out, int field, const string& body) noexcept:
    """A length-delimited field: a sub-message (present even when empty) or
    a string."""
    _tag(out, field, LENGTH_DELIMITED)
    _varint(out, body.size())
    out.append(body)


cdef inline void _number(string& out, int field, uint64_t v) noexcept:
    """A varint field, left out when zero (proto3)."""
    if v:
        _tag(out, field, VARINT)
        _varint(out, v)


cdef inline int _unsigned(string& out, int field, object value) except -1:
    cdef uint64_t v
    if value is not None:
        v = value  # OverflowError for a negative number
        _number(out, field, v)
    return 0


cdef inline int _signed(string& out, int field, object value) except -1:
    cdef int64_t v
    if value is not None:
        v = value
        _number(out, field, <uint64_t>v)  # a negative int64 is ten bytes, as protobuf writes it
    return 0


cdef int _text(string& out, int field, object value) except -1:
    cdef bytes utf8
    if not value:
        return 0
    utf8 = (<str?>value).encode("utf-8")
    _tag(out, field, LENGTH_DELIMITED)
    _varint(out, len(utf8))
    out.append(<char*>utf8, len(utf8))
    return 0


cdef int _duration(string& out, int field, object value) except -1:
    """StatisticDuration {count = 1, ns = 2}."""
    cdef string body
    cdef dict d
    if value is None:
        return 0
    d = <dict?>value
    _unsigned(body, 1, d.get("count"))
    _unsigned(body, 2, d.get("ns"))
    _message(out, field, body)
    return 0


cdef int _durations(string& out, dict d, tuple names) except -1:
    """The StatisticDuration fields ``names`` (field i + 1 for names[i])."""
    cdef int field = 1
    for name in names:
        _duration(out, field, d.get(name))
        field += 1
    return 0


# InferStatistics, InferResponseStatistics and InferBatchStatistics, their
# durations in field order (InferBatchStatistics' from field 2).
cdef tuple _INFER_STATS = ("success", "fail", "queue", "compute_input", "compute_infer",
                           "compute_output", "cache_hit", "cache_miss")
cdef tuple _RESPONSE_STATS = ("compute_infer", "compute_output", "success", "fail",
                              "empty_response", "cancel")
cdef tuple _BATCH_STATS = ("compute_input", "compute_infer", "compute_output")


cdef int _model(string& out, dict m) except -1:
    """One ModelStatistics."""
    cdef string body, part, entry
    cdef dict d
    _text(body, 1, m.get("name"))
    _text(body, 2, m.get("version"))
    _unsigned(body, 3, m.get("last_inference"))
    _unsigned(body, 4, m.get("inference_count"))
    _unsigned(body, 5, m.get("execution_count"))
    value = m.get("inference_stats")
    if value is not None:
        _durations(part, <dict?>value, _INFER_STATS)
        _message(body, 6, part)
    for value in m.get("batch_stats") or ():
        d = <dict?>value
        part.clear()
        _unsigned(part, 1, d.get("batch_size"))
        for i, name in enumerate(_BATCH_STATS):
            _duration(part, i + 2, d.get(name))
        _message(body, 7, part)
    for value in m.get("memory_usage") or ():
        d = <dict?>value
        part.clear()
        _text(part, 1, d.get("type"))
        _signed(part, 2, d.get("id"))
        _unsigned(part, 3, d.get("byte_size"))
        _message(body, 8, part)
    value = m.get("response_stats")
    if value:
        for key, stats in (<dict?>value).items():
            entry.clear()
            _text(entry, 1, key)  # map<string, InferResponseStatistics>: {key = 1, value = 2}
            part.clear()
            _durations(part, <dict?>stats, _RESPONSE_STATS)
            _message(entry, 2, part)
            _message(body, 9, entry)
    _message(out, 1, body)
    return 0


def encode_model_statistics(dict document) -> bytes:
    """The serialized ModelStatisticsResponse of ``document``
    ({"model_stats": [...]}, as Server.statistics returns it)."""
    cdef string out
    for m in document.get("model_stats") or ():
        _model(out, <dict?>m)
    return PyBytes_FromStringAndSize(out.data(), out.size())
