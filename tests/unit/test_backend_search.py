"""What a Triton backend library is told at TRITONBACKEND_Initialize: the
"cmdline" settings of its backend config, as Triton's server builds them."""

from pathlib import Path

from pyserver.backends import BackendSearch, library_settings


def search(**kwargs):
    return BackendSearch(None, Path("/models/m"), **kwargs)


def test_every_backend_gets_tritons_global_settings():
    # Triton logs them as {"cmdline":{"auto-complete-config":"true","backend-directory":
    # "/opt/tritonserver/backends","min-compute-capability":"6.000000",
    # "default-max-batch-size":"4"}}; the Python backend compares its library's
    # folder with backend-directory/python to tell itself from a python-based backend.
    assert library_settings("python", search()) == {
        "backend-directory": "/opt/tritonserver/backends",
        "auto-complete-config": "true",
        "min-compute-capability": "6.000000",
        "default-max-batch-size": "4",
    }


def test_the_servers_choices_reach_the_settings():
    got = library_settings("identity", search(backend_directory="/b", auto_complete=False,
                                              default_max_batch_size=16))
    assert got["backend-directory"] == "/b"
    assert got["auto-complete-config"] == "false"
    assert got["default-max-batch-size"] == "16"


def test_backend_config_global_then_the_backends_own():
    config = {"": {"shm-default-byte-size": "4194304", "x": "global"},
              "python": {"x": "python's"}, "identity": {"x": "identity's"}}
    got = library_settings("python", search(backend_config=config))
    assert got["shm-default-byte-size"] == "4194304"
    assert got["x"] == "python's"
    assert library_settings("other", search(backend_config=config))["x"] == "global"
