"""Fixtures: a real mxop-serverd per test module, clients connected to it.

Every test module gets its own daemon in a private temporary directory,
with a plugin directory holding copies of the build tree's example plugins
(build/plugins) and test fixtures (build/tests/plugins); it is stopped
(SIGTERM, clean exit asserted) when the module's tests are done.
"""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the package, when PYTHONPATH is not set

import mxop  # noqa: E402
from mxop import _lib  # noqa: E402

BUILD = _lib.build_dir()
SOURCE = os.path.normpath(os.path.join(HERE, "..", ".."))
PYTHON = os.environ.get("PYTHON") or sys.executable


def plugin_sources():
    # A copy of the tests run against an installed wheel (scripts/test-wheel.sh)
    # has the fixture libraries beside itself, in plugins/.
    return [os.path.join(BUILD, "plugins"), os.path.join(BUILD, "tests", "plugins"),
            os.path.join(HERE, "plugins")]


@pytest.fixture(scope="module")
def daemon():
    d = mxop.Daemon(plugin_sources=plugin_sources())
    yield d
    alive = d.alive()
    rc = d.stop()
    assert alive, "mxop-serverd died during the tests"
    assert rc == 0, "mxop-serverd did not exit cleanly (status %r)" % rc


@pytest.fixture
def client(daemon):
    c = mxop.connect(daemon, timeout=20)
    yield c
    c.close()


@pytest.fixture
def ops(client):
    """The client with every example and fixture library loaded."""
    for lib in ("relu.so", "gemm.so", "softmax.so", "running_mean.so", "sum_n.so",
                "crash.so"):
        client.load(lib)
    return client


def staged(c):
    return c.stats().staged_bytes
