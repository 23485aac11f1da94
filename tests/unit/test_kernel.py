"""The kernel's one table per decision: boolean words, the gRPC statuses,
the datatype codes; and the one grammar of the restricted-feature flags."""

import argparse

import numpy as np
import pytest

from pyserver.frontends.grpc import parse_restricted_protocols
from pyserver.frontends.http import parse_restricted_api
from pyserver.kernel import dtypes
from pyserver.kernel.errors import (
    Code,
    DecoupledModelError,
    GrpcStatus,
    ServerError,
)
from pyserver.kernel.flags import (
    FLAG_WORDS,
    PARAMETER_WORDS,
    SETTING_WORDS,
    bool_word,
    parse_bool,
)


def test_each_kind_of_value_takes_its_own_words():
    assert bool_word(" Yes ") is True and bool_word("off") is False
    assert bool_word("yes", PARAMETER_WORDS) is None  # Triton's ParseBoolValue has no yes
    assert bool_word("1", SETTING_WORDS) is None  # --metrics-config: true or false only
    assert all(bool_word(w, FLAG_WORDS) is v for w, v in FLAG_WORDS.items())
    assert parse_bool("TRUE") is True
    with pytest.raises(argparse.ArgumentTypeError, match="expected a boolean, got 'maybe'"):
        parse_bool("maybe")


def test_grpc_statuses_come_from_one_table():
    assert ServerError(Code.INVALID_ARG, "x").grpc_status == GrpcStatus.INVALID_ARGUMENT == 3
    assert ServerError(Code.UNSUPPORTED, "x").grpc_status == GrpcStatus.UNIMPLEMENTED == 12
    err = DecoupledModelError()
    assert err.http_status == 501 and err.grpc_status == GrpcStatus.UNIMPLEMENTED
    assert err.message.startswith("HTTP end point doesn't support models with decoupled")
    assert err.grpc_message.startswith("ModelInfer RPC doesn't support models with decoupled")
    assert ServerError(Code.INTERNAL, "m").grpc_message == "m"


def test_datatype_codes_round_trip():
    for code, wire in dtypes.CODE_TO_WIRE.items():
        assert dtypes.WIRE_TO_CODE[wire] == code
        if wire != "BYTES":
            assert dtypes.CODE_TO_NUMPY[code] == dtypes.WIRE_TO_NUMPY[wire]
    assert dtypes.CODE_TO_NUMPY[dtypes.WIRE_TO_CODE["BF16"]] == np.dtype(np.uint16)
    assert dtypes.BYTES_CODE not in dtypes.CODE_TO_NUMPY


@pytest.mark.parametrize("parse, option, noun, prefix", [
    (parse_restricted_api, "--http-restricted-api", "api", ""),
    # gRPC's header is triton-grpc-protocol-<key>, as Triton's (#21)
    (parse_restricted_protocols, "--grpc-restricted-protocol", "protocol",
     "triton-grpc-protocol-"),
])
def test_both_restricted_flags_share_one_grammar(parse, option, noun, prefix):
    assert parse(["health,metadata:k=v", "inference:a=b=c"]) == {
        "health": (prefix + "k", "v"), "metadata": (prefix + "k", "v"),
        "inference": (prefix + "a", "b=c")}
    with pytest.raises(ValueError) as e:
        parse(["health"])
    assert str(e.value) == (f"{option} option format is '<config name>:<setting>=<value>'. "
                            "Got health")
    with pytest.raises(ValueError, match=f"unknown restricted {noun} 'nope'"):
        parse(["nope:k=v"])
    with pytest.raises(ValueError, match=f"restricted {noun} 'health' can not be specified in "
                                         "multiple config groups"):
        parse(["health:k=v", "health:x=y"])
