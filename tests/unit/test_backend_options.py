"""How model configs become runtime settings, checked without a GPU: ONNX
Runtime execution providers and session options as Triton's onnxruntime
backend reads them, instance placement, and Triton's parameter parsing."""

import onnxruntime as ort
import pytest

from pyserver.backends._common import instance_placement, parse_bool, parse_int
from pyserver.backends.onnxruntime import check_providers, execution_providers, session_options
from pyserver.config import instance_count, normalize, parse_config_text
from pyserver.kernel.errors import Code, ServerError

GPU_BUILD = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
CPU_BUILD = ["CPUExecutionProvider"]


def config(text=""):
    return normalize(parse_config_text('name: "m"\nplatform: "onnxruntime_onnx"\n' + text), "m")


def error_of(fn):
    with pytest.raises(ServerError) as err:
        fn()
    return err.value


def test_cpu_instance_gets_the_cpu_provider_only():
    assert execution_providers(config(), "KIND_CPU", 0, GPU_BUILD) == [("CPUExecutionProvider", {})]


def test_gpu_instance_gets_cuda_on_its_device_then_cpu():
    providers = execution_providers(config(), "KIND_GPU", 1, GPU_BUILD)
    assert providers == [("CUDAExecutionProvider", {"device_id": "1"}), ("CPUExecutionProvider", {})]


def test_tensorrt_accelerator_parameters_map_to_trt_ep_options():
    c = config("""optimization { execution_accelerators { gpu_execution_accelerator : [ {
        name : "tensorrt"
        parameters { key: "precision_mode" value: "FP16" }
        parameters { key: "max_workspace_size_bytes" value: "1073741824" }
        parameters { key: "trt_engine_cache_enable" value: "1" }
        parameters { key: "trt_engine_cache_path" value: "/tmp/cache" }
        parameters { key: "trt_builder_optimization_level" value: "3" } } ] } }""")
    providers = execution_providers(c, "KIND_GPU", 0, GPU_BUILD)
    assert [name for name, _ in providers] == GPU_BUILD
    assert providers[0][1] == {"trt_fp16_enable": "1", "trt_max_workspace_size": "1073741824",
                               "trt_engine_cache_enable": "1", "trt_engine_cache_path": "/tmp/cache",
                               "trt_builder_optimization_level": "3", "device_id": "0"}
    # FP32 precision sets no flag; BF16 and INT8 have their own.
    for mode, flag in (("FP32", None), ("BF16", "trt_bf16_enable"), ("INT8", "trt_int8_enable")):
        c = config('optimization { execution_accelerators { gpu_execution_accelerator : [ { '
                   f'name : "tensorrt" parameters {{ key: "precision_mode" value: "{mode}" }} }} ] }} }}')
        options = execution_providers(c, "KIND_GPU", 2, GPU_BUILD)[0][1]
        assert options == ({flag: "1"} if flag else {}) | {"device_id": "2"}


def test_a_cpu_instance_runs_on_the_cpu_whatever_gpu_accelerators_the_config_lists():
    # Triton's onnxruntime backend reads gpu_execution_accelerator for GPU
    # instances only: one config can serve CPU and GPU deployments
    c = config('optimization { execution_accelerators { gpu_execution_accelerator : [ '
               '{ name : "cuda" parameters { key: "cudnn_conv_use_max_workspace" value: "0" } '
               'parameters { key: "use_ep_level_unified_stream" value: "1" } } ] } }')
    assert execution_providers(c, "KIND_CPU", 0, GPU_BUILD) == [("CPUExecutionProvider", {})]
    assert execution_providers(c, "KIND_CPU", 0, CPU_BUILD) == [("CPUExecutionProvider", {})]
    assert execution_providers(c, "KIND_GPU", 0, GPU_BUILD) == [
        ("CUDAExecutionProvider", {"cudnn_conv_use_max_workspace": "0",
                                   "use_ep_level_unified_stream": "1", "device_id": "0"}),
        ("CPUExecutionProvider", {})]


def test_deprecated_cuda_parameters():
    c = config("""parameters { key: "cudnn_conv_algo_search" value: { string_value: "1" } }
parameters { key: "gpu_mem_limit" value: { string_value: "4294967200" } }
parameters { key: "arena_extend_strategy" value: { string_value: "1" } }""")
    options = execution_providers(c, "KIND_GPU", 0, GPU_BUILD)[0][1]
    assert options == {"device_id": "0", "cudnn_conv_algo_search": "HEURISTIC",
                       "gpu_mem_limit": "4294967200", "arena_extend_strategy": "kSameAsRequested",
                       "do_copy_in_default_stream": "1"}
    bad = config('parameters { key: "cudnn_conv_algo_search" value: { string_value: "7" } }')
    err = error_of(lambda: execution_providers(bad, "KIND_GPU", 0, GPU_BUILD))
    assert err.code == Code.INVALID_ARG
    assert err.message == "unsupported cudnn_conv_algo_search value '7' is requested"


@pytest.mark.parametrize("accelerators, message", [
    ('gpu_execution_accelerator : [ { name : "fast" } ]', "unknown Execution Accelerator 'fast' is requested"),
    ('cpu_execution_accelerator : [ { name : "openvino" } ]',
     "unknown Execution Accelerator 'openvino' is requested"),
    ('gpu_execution_accelerator : [ { name : "tensorrt" parameters { key: "speed" value: "max" } } ]',
     "unknown parameter 'speed' is provided for TensorRT Execution Accelerator"),
    ('gpu_execution_accelerator : [ { name : "tensorrt" parameters { key: "precision_mode" value: "FP8" } } ]',
     "unsupported precision mode 'FP8' is requested"),
    ('gpu_execution_accelerator : [ { name : "tensorrt" parameters { key: "trt_dla_enable" value: "yes" } } ]',
     "failed to convert 'yes' to boolean"),
    ('gpu_execution_accelerator : [ { name : "tensorrt" parameters { key: "trt_dla_core" value: "x" } } ]',
     "failed to convert 'x' to integral number"),
])
def test_bad_accelerators_are_tritons_errors(accelerators, message):
    c = config(f"optimization {{ execution_accelerators {{ {accelerators} }} }}")
    err = error_of(lambda: execution_providers(c, "KIND_GPU", 0, GPU_BUILD))
    assert err.code == Code.INVALID_ARG
    assert err.message == message


def test_gpu_without_onnxruntime_gpu_is_a_clear_load_error():
    err = error_of(lambda: execution_providers(config(), "KIND_GPU", 0, CPU_BUILD))
    assert err.code == Code.UNAVAILABLE
    assert "needs CUDAExecutionProvider" in err.message
    assert "install onnxruntime-gpu" in err.message
    c = config('optimization { execution_accelerators { gpu_execution_accelerator : [ '
               '{ name : "tensorrt" } ] } }')
    err = error_of(lambda: execution_providers(c, "KIND_GPU", 0, CPU_BUILD))
    assert "needs TensorrtExecutionProvider, CUDAExecutionProvider" in err.message


def test_session_options_as_triton_reads_them():
    levels = {"": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
              "-1": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
              "1": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
              "2": ort.GraphOptimizationLevel.ORT_DISABLE_ALL}
    for level, expected in levels.items():
        text = f"optimization {{ graph {{ level: {level} }} }}" if level else ""
        assert session_options(config(text), 1)[0].graph_optimization_level == expected
    options, _ = session_options(config(), 3)
    assert options.intra_op_num_threads == 3  # the instance's share of the cores
    assert options.inter_op_num_threads == 1
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    options, _ = session_options(config("""
parameters { key: "session.intra_op.allow_spinning" value: { string_value: "1" } }
parameters { key: "session.use_device_allocator_for_initializers" value: { string_value: "1" } }"""), 1)
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "1"
    assert options.get_session_config_entry("session.use_device_allocator_for_initializers") == "1"
    options, _ = session_options(config("""
parameters { key: "intra_op_thread_count" value: { string_value: "5" } }
parameters { key: "inter_op_thread_count" value: { string_value: "2" } }
parameters { key: "execution_mode" value: { string_value: "1" } }
parameters { key: "enable_mem_arena" value: { string_value: "0" } }
parameters { key: "enable_mem_pattern" value: { string_value: "false" } }"""), 1)
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (5, 2)
    assert options.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert not options.enable_cpu_mem_arena and not options.enable_mem_pattern
    err = error_of(lambda: session_options(
        config('parameters { key: "execution_mode" value: { string_value: "3" } }'), 1))
    assert err.message == ("Invalid configuration value provided. Expected values for  "
                           "execution_mode are 0 or 1 but got 3 .")


def test_instance_placement_puts_count_instances_on_each_gpu_of_the_group():
    # Triton: a KIND_GPU group makes `count` instances on every GPU it lists
    c = config("""instance_group [ { count: 3 kind: KIND_GPU gpus: [ 1, 3 ] },
                                   { name: "cpu" count: 2 kind: KIND_CPU } ]""")
    assert [instance_count(g) for g in c.instance_group] == [6, 2]
    assert [instance_placement(c, f"m_0_{i}") for i in range(6)] == [
        ("KIND_GPU", 1), ("KIND_GPU", 1), ("KIND_GPU", 1),
        ("KIND_GPU", 3), ("KIND_GPU", 3), ("KIND_GPU", 3)]
    assert instance_placement(c, "m_0_6") == ("KIND_CPU", 0)  # no such instance
    assert instance_placement(c, "cpu_1") == ("KIND_CPU", 0)
    c = config("instance_group [ { count: 1 kind: KIND_GPU } ]")
    assert instance_placement(c, "m_0_0") == ("KIND_GPU", 0)


def test_a_gpu_group_that_lists_no_gpus_runs_on_every_visible_gpu():
    text = 'name: "m"\nplatform: "onnxruntime_onnx"\n'
    c = normalize(parse_config_text(text + "instance_group [ { count: 2 kind: KIND_GPU } ]"),
                  "m", gpu_count=2)
    assert list(c.instance_group[0].gpus) == [0, 1]
    assert instance_count(c.instance_group[0]) == 4
    assert [instance_placement(c, f"m_0_{i}")[1] for i in range(4)] == [0, 0, 1, 1]
    listed = normalize(parse_config_text(
        text + "instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]"), "m", gpu_count=2)
    assert list(listed.instance_group[0].gpus) == [1]
    # left to KIND_AUTO by a backend that cannot use a GPU: the CPU
    auto = normalize(parse_config_text(text + "instance_group [ { kind: KIND_AUTO } ]"),
                     "m", gpu_count=2)
    assert [(g.kind, list(g.gpus)) for g in auto.instance_group] == [(2, [])]


def test_triton_value_parsing():
    assert [parse_bool(v) for v in ("true", "ON", "1", "False", "off", "0")] == [
        True, True, True, False, False, False]
    assert parse_int("42") == 42 and parse_int("-3") == -3 and parse_int("7abc") == 7
    assert error_of(lambda: parse_int("abc")).message == "failed to convert 'abc' to integral number"


def test_tensorrt_profile_choice_is_the_nearest_that_fits():
    from pyserver.backends._common import pick_profile

    small = ("0", 0, {"X": ((1, 16), (2, 16), (4, 16))})
    large = ("1", 1, {"X": ((1, 16), (32, 16), (64, 16))})
    assert pick_profile([small, large], {"X": (1, 16)}) == 0
    assert pick_profile([small, large], {"X": (4, 16)}) == 0  # |2-4| < |32-4|
    assert pick_profile([small, large], {"X": (20, 16)}) == 1  # beyond the small one's max
    assert pick_profile([large, small], {"X": (3, 16)}) == 1
    err = error_of(lambda: pick_profile([small], {"X": (8, 16)}))
    assert err.code == Code.INVALID_ARG
    assert err.message == ("failed to find any Optimization Profile among [ 0[0]] to support the "
                           "requested dimensions (or shape values), proceeding with first profile.")
    assert error_of(lambda: pick_profile([small, large], {"X": (2, 17)})).code == Code.INVALID_ARG


def test_auto_kind_prefers_a_usable_gpu():
    from pyserver.backends._common import prefer_gpu

    raw = parse_config_text('name: "m"\ninstance_group [ { count: 2 }, { kind: KIND_CPU } ]')
    prefer_gpu(raw, False)
    assert [g.kind for g in raw.instance_group] == [0, 2]  # left to normalization (CPU here)
    prefer_gpu(raw, True)
    assert [g.kind for g in raw.instance_group] == [1, 2]  # KIND_GPU; an explicit CPU stays
    empty = parse_config_text('name: "m"')
    prefer_gpu(empty, True)
    assert [g.kind for g in empty.instance_group] == [1]
    normalized = normalize(empty, "m")
    assert instance_placement(normalized, "m_0_0") == ("KIND_GPU", 0)


def test_cpu_session_runs_natively_with_the_wrappers_errors(tmp_path):
    """A CPU-only session is run through the pybind session directly (the
    Python wrapper's checks cost ~4 µs a call); its outputs are the
    wrapper's, and a failure reads as the wrapper's own error."""
    import numpy as np

    from pyserver.backends.onnxruntime import OnnxRuntimeBackend
    from pyserver.config import load_config_file
    from pyserver.testing import write_add_sub

    folder = write_add_sub(tmp_path)
    cfg = normalize(load_config_file(folder / "config.pbtxt"), "add_sub")
    backend = OnnxRuntimeBackend(str(folder / "1" / "model.onnx"), cfg, "add_sub_0", "cpu", 1)
    assert backend._native_run is not None
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.ones((2, 16), np.float32)
    out = backend.execute({"INPUT0": a, "INPUT1": b})
    expected = backend.session.run(backend.output_names, {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(out["OUTPUT0"], expected[0])
    np.testing.assert_array_equal(out["OUTPUT1"], a - b)
    with pytest.raises(ValueError) as native_error:
        backend.execute({"INPUT0": a})
    with pytest.raises(ValueError) as wrapper_error:
        backend.session.run(backend.output_names, {"INPUT0": a})
    assert str(native_error.value) == str(wrapper_error.value)


def test_a_gpu_provider_onnxruntime_dropped_fails_the_load():
    """onnxruntime-gpu whose CUDA libraries are not found creates the
    session on the CPU with a warning: the load fails instead."""
    c = config("instance_group [ { kind: KIND_GPU } ]")
    requested = execution_providers(c, "KIND_GPU", 0, GPU_BUILD)
    check_providers(c, requested, ["CUDAExecutionProvider", "CPUExecutionProvider"])
    err = error_of(lambda: check_providers(c, requested, ["CPUExecutionProvider"]))
    assert err.code == Code.UNAVAILABLE
    assert err.message.startswith("unable to load model 'm': onnxruntime could not create "
                                  "CUDAExecutionProvider (the session has CPUExecutionProvider)")
    check_providers(config(), execution_providers(config(), "KIND_CPU", 0, CPU_BUILD),
                    ["CPUExecutionProvider"])


def test_a_gpu_session_preloads_the_cuda_libraries_once(tmp_path, monkeypatch):
    """onnxruntime-gpu finds pip's CUDA and cuDNN libraries only through
    preload_dlls(): called once, before the first GPU session, never for a
    CPU one."""
    from pyserver.backends import onnxruntime as backend_module
    from pyserver.testing import write_add_sub

    write_add_sub(tmp_path, max_batch_size=0)
    model = str(tmp_path / "add_sub" / "1" / "model.onnx")
    calls = []
    monkeypatch.setattr(ort, "preload_dlls", lambda: calls.append(1), raising=False)
    monkeypatch.setattr(ort, "get_available_providers", lambda: GPU_BUILD)
    backend_module._preload_cuda_libraries.cache_clear()

    def session(path, options, providers):
        raise RuntimeError("no GPU here")

    monkeypatch.setattr(ort, "InferenceSession", session)
    cpu = config("instance_group [ { kind: KIND_CPU } ]")
    gpu = config("instance_group [ { kind: KIND_GPU } ]")
    with pytest.raises(ServerError):
        backend_module.OnnxRuntimeBackend(model, cpu, "m_0_0", "cpu", 1)
    assert calls == []
    for _ in range(2):
        with pytest.raises(ServerError):
            backend_module.OnnxRuntimeBackend(model, gpu, "m_0_0", "cpu", 1)
    assert calls == [1]
    backend_module._preload_cuda_libraries.cache_clear()
