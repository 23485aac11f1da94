"""Which custom batching library a model version gets (Triton's search and
errors), without loading one."""

from pathlib import Path

import pytest

from pyserver._proto import ModelConfig
from pyserver.kernel.errors import Code, ServerError
from pyserver.model.custom_batching import LIBRARY_NAME, PATH_PARAMETER, find_strategy


def config(path: str | None = None, sequence: bool = False) -> ModelConfig:
    c = ModelConfig(name="m")
    if path is not None:
        c.parameters[PATH_PARAMETER].string_value = path
    if sequence:
        c.sequence_batching.SetInParent()
    return c


@pytest.fixture
def dirs(tmp_path):
    model, backend = tmp_path / "models" / "m", tmp_path / "backends" / "b"
    version = model / "1"
    for d in (version, backend):
        d.mkdir(parents=True)
    return version, model, backend


def test_searched_in_version_then_model_then_backend_folder(dirs):
    version, model, backend = dirs
    assert find_strategy(config(), version, model, backend) is None
    for folder in (backend, model, version):  # each found before the one after it
        (folder / LIBRARY_NAME).write_bytes(b"")
        assert find_strategy(config(), version, model, backend) == str(folder / LIBRARY_NAME)


def test_the_parameter_names_a_file_inside_the_model_folder(dirs, tmp_path, monkeypatch):
    version, model, backend = dirs
    (model / "lib.so").write_bytes(b"")
    (backend / LIBRARY_NAME).write_bytes(b"")  # the parameter wins over the search
    assert find_strategy(config(str(model / "lib.so")), version, model, backend) == \
        str((model / "lib.so").resolve())
    monkeypatch.chdir(model)  # relative to the working directory, as Triton resolves it
    assert find_strategy(config("lib.so"), version, model, backend) == \
        str((model / "lib.so").resolve())

    def refused(path, code, text):
        with pytest.raises(ServerError) as err:
            find_strategy(config(path), version, model, backend)
        assert (err.value.code, err.value.message) == (code, text)

    outside = tmp_path / "lib.so"
    outside.write_bytes(b"")
    refused(str(outside), Code.INVALID_ARG, "Batching library path escapes model repository.")
    refused(str(model / ".." / ".." / "lib.so"), Code.INVALID_ARG,
            "Batching library path escapes model repository.")
    refused(str(model / "none.so"), Code.NOT_FOUND,
            f"Batching library path not found: {model / 'none.so'}")
    refused("", Code.INVALID_ARG, "Parent path and child path must be non-empty")


def test_sequence_models_have_none(dirs):
    version, model, backend = dirs
    (model / LIBRARY_NAME).write_bytes(b"")
    assert find_strategy(config(sequence=True), version, model, backend) is None
    with pytest.raises(ServerError) as err:
        find_strategy(config(str(model / LIBRARY_NAME), sequence=True), version, model, backend)
    assert err.value.code == Code.INVALID_ARG
    assert "cannot be specified with sequence batcher" in err.value.message
    assert Path(model / LIBRARY_NAME).exists()
