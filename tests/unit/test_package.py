"""`import pyserver` stays light (the server command chooses its malloc
before the server's modules load: runtime/allocator.py), and every public
name still resolves."""

import subprocess
import sys

import pyserver


def test_import_pyserver_loads_none_of_the_server():
    code = ("import sys, pyserver, pyserver.runtime.allocator; "
            "print(sorted(m for m in sys.modules if m.startswith(('pyserver.server', "
            "'pyserver.engine', 'numpy'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_public_name_resolves():
    assert sorted(pyserver.__all__) == sorted([*pyserver._PUBLIC, "__version__"])
    from pyserver.server import Server
    assert pyserver.Server is Server
    for name in pyserver.__all__:
        assert getattr(pyserver, name) is not None
    try:
        pyserver.NoSuchThing
    except AttributeError as err:
        assert "no attribute 'NoSuchThing'" in str(err)
    else:
        raise AssertionError("expected AttributeError")
