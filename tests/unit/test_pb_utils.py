"""pyserver's triton_python_backend_utils outside a worker: the objects a
Triton Python model builds and reads, and the auto-complete config API."""

import json
import sys

import numpy as np
import pytest

from pyserver.backends.python import triton_python_backend_utils as pb

# -- Tensor -------------------------------------------------------------------------

def test_tensor_numpy_round_trip():
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = pb.Tensor("OUT", array)
    assert t.name() == "OUT"
    assert t.as_numpy() is array
    assert t.shape() == [2, 3]
    assert t.triton_dtype() == pb.TYPE_FP32 == 11
    assert t.is_cpu()


@pytest.mark.parametrize("dtype, code", [
    (np.bool_, 1), (np.uint8, 2), (np.uint16, 3), (np.uint32, 4), (np.uint64, 5),
    (np.int8, 6), (np.int16, 7), (np.int32, 8), (np.int64, 9), (np.float16, 10),
    (np.float32, 11), (np.float64, 12), (np.object_, 13)])
def test_dtype_codes(dtype, code):
    assert pb.numpy_to_triton_type(dtype) == code
    assert pb.triton_to_numpy_type(code) == dtype
    assert pb.Tensor("x", np.zeros(2, dtype=dtype)).triton_dtype() == code


def test_every_integer_type_number_and_byte_order():
    # The compiled Tensor reads numpy's type number: C's long and long long
    # are both 64-bit here, int and long both 32-bit on other ABIs; a
    # non-native byte order is a type Triton's tensors do not have.
    for char, code in (("q", 9), ("l", 9), ("Q", 5), ("L", 5), ("i", 8), ("I", 4), ("h", 7),
                       ("H", 3), ("b", 6), ("B", 2), ("e", 10), ("d", 12), ("?", 1)):
        assert pb.Tensor("x", np.zeros(2, dtype=char)).triton_dtype() == code, char
        assert pb.numpy_to_triton_type(char) == code, char
    swapped = np.zeros(2, dtype=np.dtype(np.float32).newbyteorder())
    with pytest.raises(pb.TritonModelException, match="NumPy dtype is not supported."):
        pb.Tensor("x", swapped)
    assert pb.numpy_to_triton_type(swapped.dtype) is None
    assert pb.numpy_to_triton_type("not a type") is None
    assert pb.Tensor("x", [1.5, 2.5]).triton_dtype() == pb.TYPE_FP64  # not an array: made one
    assert type(pb.Tensor("x", np.zeros(1))) is pb.Tensor


def test_tensor_makes_non_contiguous_arrays_contiguous():
    base = np.arange(12, dtype=np.int32).reshape(3, 4)
    t = pb.Tensor("x", base[:, ::2])
    assert t.as_numpy().flags.c_contiguous
    np.testing.assert_array_equal(t.as_numpy(), base[:, ::2])


def test_tensor_rejects_empty_name_and_unsupported_dtype():
    with pytest.raises(pb.TritonModelException, match="Tensor name cannot be an empty string."):
        pb.Tensor("", np.zeros(1))
    with pytest.raises(pb.TritonModelException, match="NumPy dtype is not supported."):
        pb.Tensor("x", np.zeros(1, dtype=np.complex64))
    with pytest.raises(pb.TritonModelException, match="NumPy dtype is not supported."):
        pb.Tensor("x", np.array(["unicode"]))


def test_bytes_tensors():
    t = pb.Tensor("s", np.array([b"ab", "cé", 7], dtype=np.object_))
    assert t.triton_dtype() == pb.TYPE_BYTES
    assert pb.Tensor("s", np.array([b"ab", b"c"], dtype=np.bytes_)).triton_dtype() == pb.TYPE_BYTES
    raw = pb.serialize_byte_tensor(t.as_numpy())
    assert raw == b"\x02\x00\x00\x00ab\x03\x00\x00\x00c\xc3\xa9\x01\x00\x00\x007"
    back = pb.deserialize_bytes_tensor(raw)
    assert back.dtype == np.object_ and back.tolist() == [b"ab", "cé".encode(), b"7"]
    assert pb.serialize_byte_tensor(np.array([], dtype=np.object_)) == ()
    assert pb.serialize_byte_tensor(np.zeros(2, np.float32)) is None
    with pytest.raises(pb.TritonModelException, match="DLPack does not have support for string tensors."):
        t.to_dlpack()


def test_dlpack_both_ways_share_memory():
    array = np.arange(4, dtype=np.float32)
    t = pb.Tensor("x", array)
    from_capsule = pb.Tensor.from_dlpack("y", t.to_dlpack())
    assert from_capsule.name() == "y"
    np.testing.assert_array_equal(from_capsule.as_numpy(), array)
    array[0] = 42
    assert from_capsule.as_numpy()[0] == 42  # no copy
    from_object = pb.Tensor.from_dlpack("z", np.arange(3, dtype=np.int64))
    assert from_object.triton_dtype() == pb.TYPE_INT64
    via_protocol = np.from_dlpack(t)  # Tensor implements __dlpack__ / __dlpack_device__
    assert via_protocol[0] == 42
    assert t.__dlpack_device__() == (1, 0)
    with pytest.raises(pb.TritonModelException, match="not contiguous"):
        pb.Tensor.from_dlpack("w", np.arange(8, dtype=np.int32)[::2])


# -- requests and responses ---------------------------------------------------------------

def test_lookup_helpers():
    a, b = pb.Tensor("A", np.zeros(1)), pb.Tensor("B", np.ones(1))
    request = pb.InferenceRequest(model_name="m", inputs=[a, b], requested_output_names=["OUT"])
    assert pb.get_input_tensor_by_name(request, "B") is b
    assert pb.get_input_tensor_by_name(request, "C") is None

    class Duck:  # any object with inputs() and tensors with name() will do
        def inputs(self):
            return [b]
    assert pb.get_input_tensor_by_name(Duck(), "B") is b
    assert pb.get_input_tensor_by_name(Duck(), "A") is None
    response = pb.InferenceResponse(output_tensors=[a])
    assert pb.get_output_tensor_by_name(response, "A") is a
    assert pb.get_output_tensor_by_name(response, "B") is None
    config = {"input": [{"name": "X", "data_type": "TYPE_FP32"}],
              "output": [{"name": "Y", "data_type": "TYPE_STRING"}]}
    assert pb.get_input_config_by_name(config, "X")["data_type"] == "TYPE_FP32"
    assert pb.get_output_config_by_name(config, "Y")["data_type"] == "TYPE_STRING"
    assert pb.get_input_config_by_name(config, "Y") is None
    assert pb.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb.triton_string_to_numpy("TYPE_BOOL") is bool
    assert not pb.using_decoupled_model_transaction_policy(config)
    assert pb.using_decoupled_model_transaction_policy({"model_transaction_policy": {"decoupled": True}})


def test_bls_request_object():
    request = pb.InferenceRequest(model_name="other", inputs=[], requested_output_names=["O", "O"],
                                  request_id="r", correlation_id="seq-1", flags=1, timeout=5,
                                  parameters={"k": 1})
    assert request.request_id() == "r"
    assert request.correlation_id() == "seq-1"
    assert request.requested_output_names() == ["O"]
    assert request.flags() == pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
    assert request.timeout() == 5
    assert json.loads(request.parameters()) == {"k": 1}
    assert request.trace().get_context() is None
    assert not request.is_cancelled()
    with pytest.raises(pb.TritonModelException, match="only available inside a model served"):
        request.exec()  # no worker runtime here
    with pytest.raises(TypeError):
        request.exec(decoupled=None)
    # a bytes model name, as python_backend's BLS example passes it (#21)
    assert pb.InferenceRequest(model_name=b"add_sub", inputs=[],
                               requested_output_names=[])._model_name == "add_sub"
    with pytest.raises(pb.TritonModelException, match="Correlation ID must be integer or string"):
        pb.InferenceRequest(model_name="m", inputs=[], requested_output_names=[], correlation_id=1.5)
    with pytest.raises(pb.TritonModelException, match="parameters values"):
        pb.InferenceRequest(model_name="m", inputs=[], requested_output_names=[],
                            parameters={"f": 1.5})


def test_response_parameters_and_errors():
    response = pb.InferenceResponse(parameters={"a": True, "b": 2, "c": "x"})
    assert not response.has_error() and response.error() is None
    assert json.loads(response.parameters()) == {"a": True, "b": 2, "c": "x"}
    assert pb.InferenceResponse().parameters() == "{}"
    assert pb.InferenceResponse(parameters={}).parameters() == "{}"
    assert pb.InferenceResponse(parameters={})._parameters_dict is None
    with pytest.raises(pb.TritonModelException, match="Expect dict"):
        pb.InferenceResponse(parameters=[("a", 1)])
    error = pb.TritonError("nope", pb.TritonError.NOT_FOUND)
    failed = pb.InferenceResponse(error=error)
    assert failed.has_error() and failed.error() is error
    assert error.message() == "nope" and error.code() == pb.TritonError.NOT_FOUND
    assert pb.TritonError("x").code() == pb.TritonError.INTERNAL
    with pytest.raises(pb.TritonModelException, match="keys to have type str"):
        pb.InferenceResponse(parameters={1: "x"})
    with pytest.raises(TypeError):
        pb.InferenceResponse(output_tensors=[np.zeros(1)])
    with pytest.raises(TypeError):
        pb.InferenceResponse(error="a string")


def test_error_codes_match_tritonserver_numbers():
    names = ["UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED",
             "ALREADY_EXISTS", "CANCELLED"]
    assert [int(getattr(pb.TritonError, n)) for n in names] == list(range(8))
    assert pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL == 1
    assert pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE == 2


def test_logger_without_a_worker_writes_stderr(capsys):
    line = sys._getframe().f_lineno + 1
    pb.Logger.log_info("hello")
    pb.Logger.log("careful", pb.Logger.LogLevel.WARNING)
    pb.Logger.log_error("bad")
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("I") and err[0].endswith(f"test_pb_utils.py:{line}] hello")
    assert err[1].startswith("W") and err[1].endswith("] careful")
    assert err[2].startswith("E") and err[2].endswith("] bad")


def test_server_calls_outside_a_worker_say_so():
    with pytest.raises(pb.TritonModelException, match="only available inside a model served"):
        pb.MetricFamily("m", "d", pb.MetricFamily.COUNTER)
    with pytest.raises(pb.TritonModelException, match="only available inside a model served"):
        pb.load_model("x")
    request = pb.InferenceRequest(model_name="m", inputs=[], requested_output_names=[])
    with pytest.raises(pb.TritonModelException, match="only the requests execute\\(\\) receives"):
        request.get_response_sender()


def test_response_sender_checks_its_arguments():
    request = pb.InferenceRequest._incoming(0, "r", 0, 0, 0, "{}", [], [], "m", "1", key=7)
    sender = request.get_response_sender()
    assert request.get_response_sender() is sender
    with pytest.raises(pb.TritonModelException,
                       match="Unable to send response. Unsupported flag provided."):
        sender.send(pb.InferenceResponse(), flags=4)
    with pytest.raises(pb.TritonModelException, match="Inference Response object must be "
                       "provided when the response flags is set to zero."):
        sender.send()
    with pytest.raises(TypeError):
        sender.send("not a response")


def test_metric_arguments_are_checked_before_the_server_is_asked():
    family = pb.MetricFamily.__new__(pb.MetricFamily)
    family._kind = pb.MetricFamily.HISTOGRAM
    with pytest.raises(pb.TritonModelException, match="Labels must be a dictionary"):
        family.Metric(labels=["a"])
    with pytest.raises(pb.TritonModelException, match="Missing required buckets"):
        family.Metric(labels={})
    with pytest.raises(pb.TritonModelException, match="Buckets must be a list"):
        family.Metric(buckets=(1.0,))
    family._kind = pb.MetricFamily.COUNTER
    with pytest.raises(pb.TritonModelException, match="Unexpected buckets found"):
        family.Metric(buckets=[1.0])
    with pytest.raises(pb.TritonModelException, match="Unknown metric kind"):
        pb.MetricFamily("m", "d", 7)


# -- auto-complete config --------------------------------------------------------------------------

def base_config(**extra):
    config = {"name": "m", "max_batch_size": 0, "input": [], "output": []}
    config.update(extra)
    return pb.ModelConfig(json.dumps(config))


def test_model_config_builds_inputs_outputs_and_batching():
    config = base_config()
    config.add_input({"name": "I", "data_type": "TYPE_FP32", "dims": [4], "optional": True})
    config.add_output({"name": "O", "data_type": "TYPE_INT32", "dims": [-1]})
    config.set_max_batch_size(8)
    config.set_dynamic_batching()
    config.set_model_transaction_policy({"decoupled": False})
    d = config.as_dict()
    assert d["input"] == [{"name": "I", "data_type": "TYPE_FP32", "dims": [4], "optional": True}]
    assert d["output"] == [{"name": "O", "data_type": "TYPE_INT32", "dims": [-1]}]
    assert d["max_batch_size"] == 8 and d["dynamic_batching"] == {}
    assert d["model_transaction_policy"] == {"decoupled": False}


def test_model_config_fills_a_declared_tensor():
    config = base_config(input=[{"name": "I", "data_type": "TYPE_INVALID", "dims": []}])
    config.add_input({"name": "I", "data_type": "TYPE_FP32", "dims": [2]})
    assert config.as_dict()["input"] == [{"name": "I", "data_type": "TYPE_FP32", "dims": [2]}]


def test_model_config_conflicts():
    config = base_config(max_batch_size=16,
                         input=[{"name": "I", "data_type": "TYPE_INT32", "dims": [3]}],
                         output=[{"name": "O", "data_type": "TYPE_FP32", "dims": [3]}],
                         sequence_batching={"max_sequence_idle_microseconds": 1})
    with pytest.raises(ValueError, match="configuration specified max_batch_size 16"):
        config.set_max_batch_size(4)
    with pytest.raises(ValueError, match="configuration expects datatype TYPE_INT32 for input 'I', "
                                         "model provides TYPE_FP32"):
        config.add_input({"name": "I", "data_type": "TYPE_FP32", "dims": [3]})
    with pytest.raises(ValueError, match=r"the model expects dims \[4\] but the model configuration "
                                         r"specifies dims \[3\]"):
        config.add_output({"name": "O", "data_type": "TYPE_FP32", "dims": [4]})
    with pytest.raises(ValueError, match="contains property other than 'name', 'data_type' and 'dims'"):
        config.add_output({"name": "P", "data_type": "TYPE_FP32", "dims": [1], "optional": True})
    with pytest.raises(ValueError, match="is missing 'dims' property"):
        config.add_input({"name": "J", "data_type": "TYPE_FP32"})
    with pytest.raises(ValueError, match="tries to set scheduling_choice as 'dynamic_batching'"):
        config.set_dynamic_batching()
    config.set_model_transaction_policy({"decoupled": True})
    with pytest.raises(ValueError, match="trying to change decoupled property"):
        config.set_model_transaction_policy({"decoupled": False})
    with pytest.raises(ValueError, match="contains property other than 'decoupled'"):
        config.set_model_transaction_policy({"other": 1})


def test_the_objects_pickle_and_copy():
    # A model may hand them to multiprocessing or copy them: the compiled
    # classes keep what the Python ones offered.
    import copy
    import pickle

    t = pb.Tensor("x", np.arange(3, dtype=np.float32))
    back = pickle.loads(pickle.dumps(t))
    assert (back.name(), back.triton_dtype(), back.as_numpy().tolist()) == ("x", 11, [0, 1, 2])
    assert copy.copy(t).as_numpy() is t.as_numpy()
    response = pickle.loads(pickle.dumps(pb.InferenceResponse([t], parameters={"a": 1})))
    assert response.output_tensors()[0].name() == "x" and response.parameters() == '{"a": 1}'
    error = pickle.loads(pickle.dumps(pb.TritonError("boom", pb.TritonError.NOT_FOUND)))
    assert (error.message(), error.code()) == ("boom", pb.TritonError.NOT_FOUND)
    assert str(pickle.loads(pickle.dumps(pb.TritonModelException("no")))) == "no"
    request = pickle.loads(pickle.dumps(
        pb.InferenceRequest(model_name="m", inputs=[t], requested_output_names=["y"])))
    assert type(request) is pb.InferenceRequest and request.inputs()[0].name() == "x"
    assert repr(t) == "Tensor('x', dtype=FP32, shape=[3])"


def test_incoming_requests_are_of_the_class_asked_for_and_only_a_request_class():
    """new_request makes its request through RequestBase's own constructor
    for the class given (a C call), with every field set; a class that is
    not a request class is refused rather than filled."""
    from pyserver.engine.pb_objects import new_request

    class Sub(pb.InferenceRequest):
        pass

    r = new_request(Sub, 3, "id", 9, 0, 5, "{}", ["OUT"], [], "m", "1", 11, None)
    assert type(r) is Sub
    assert (r.request_id(), r.correlation_id(), r.timeout(), r.requested_output_names(),
            r.model_name(), r._index, r._key) == ("id", 9, 5, ["OUT"], "m", 3, 11)
    with pytest.raises(TypeError, match="not a pb_utils.InferenceRequest"):
        new_request(dict, 0, "", 0, 0, 0, "{}", [], [], "m", "1", 0, None)
