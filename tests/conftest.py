"""Session-wide test discipline.

tritonclient.http runs on gevent, whose hub, pools and greenlets belong to the
thread that made them (the test's main thread). Python's cyclic collector
runs in whichever thread happens to allocate when a threshold trips, and in
an in-process server that is often a server thread (a model loader, an
instance thread). A client caught in a reference cycle (a `pytest.raises`
traceback holds the test's frame) was then finalized on a server thread:
gevent raised InvalidThreadUseError from the client's __del__, and once a
run crashed inside the collector. So the automatic collector is off during
tests, and each test's garbage is collected on the main thread after the
test's own fixtures (its servers) are torn down.
"""

import gc

import pytest


def pytest_configure(config):
    gc.disable()


def pytest_collection_finish(session):
    # What the test modules imported (torch, onnx, tritonclient, openai...)
    # lives for the whole session: frozen, the collection after each test
    # walks only what the tests made since (a full walk of everything cost
    # ~0.1-0.2 s per test).
    gc.collect()
    gc.freeze()


def pytest_unconfigure(config):
    gc.unfreeze()
    gc.enable()


@pytest.fixture(autouse=True)
def _collect_garbage_on_the_main_thread():
    yield
    gc.collect()
