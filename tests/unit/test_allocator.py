"""pyserver/runtime/allocator.py: when the server command re-executes itself
with jemalloc preloaded, and when it leaves the process alone."""

import pytest

from pyserver.runtime import allocator
from pyserver.runtime.allocator import preload_environment

JE = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def test_auto_preloads_jemalloc_where_the_machine_has_it():
    env = preload_environment({"PATH": "/bin"}, JE)
    # oneTBB's hwloc must not be RTLD_DEEPBIND-loaded under a preloaded malloc
    assert env == {"PATH": "/bin", "LD_PRELOAD": JE, "TBB_ENABLE_SANITIZERS": "1"}
    assert preload_environment({"PYSERVER_MALLOC": " Auto "}, JE)["LD_PRELOAD"] == JE


def test_auto_goes_on_without_jemalloc():
    assert preload_environment({}, None) is None


def test_the_reexecuted_process_does_not_reexecute_again():
    assert preload_environment({"LD_PRELOAD": JE}, JE) is None
    assert preload_environment({"LD_PRELOAD": f"/x/libfoo.so:{JE}",
                                "PYSERVER_MALLOC": "jemalloc"}, JE) is None
    assert preload_environment({"LD_PRELOAD": f"/x/libfoo.so {JE}"}, JE) is None


def test_auto_leaves_a_users_own_preload_alone():
    # a sanitizer's runtime (make sanitize-python) or any other preload
    assert preload_environment({"LD_PRELOAD": "/usr/lib/libasan.so"}, JE) is None


def test_jemalloc_asked_for_comes_after_the_users_preload():
    env = preload_environment({"LD_PRELOAD": "/x/libfoo.so", "PYSERVER_MALLOC": "jemalloc"}, JE)
    assert env["LD_PRELOAD"] == f"/x/libfoo.so:{JE}"


def test_system_keeps_the_c_librarys_malloc():
    assert preload_environment({"PYSERVER_MALLOC": "system"}, JE) is None


def test_jemalloc_asked_for_but_missing_is_an_error_that_says_what_to_do():
    with pytest.raises(ValueError, match="PYSERVER_MALLOC=jemalloc, but libjemalloc.so.2 is in "
                                         "none of .*libjemalloc2.*PYSERVER_MALLOC=system"):
        preload_environment({"PYSERVER_MALLOC": "jemalloc"}, None)


def test_an_unknown_choice_is_an_error():
    with pytest.raises(ValueError, match="PYSERVER_MALLOC must be one of auto, jemalloc, "
                                         "system, got 'tcmalloc'"):
        preload_environment({"PYSERVER_MALLOC": "tcmalloc"}, JE)


def test_find_jemalloc_takes_the_first_file_there(tmp_path):
    lib = tmp_path / "libjemalloc.so.2"
    lib.write_bytes(b"")
    assert allocator.find_jemalloc([str(tmp_path / "missing"), str(lib)]) == str(lib)
    assert allocator.find_jemalloc([str(tmp_path / "missing")]) is None
