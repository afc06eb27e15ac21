"""Finding and loading libkiln, versions, errors, contexts."""
import os
import re
import subprocess
import sys

import pytest

import kiln
from kiln import _lib

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
HEADER = os.path.join(PYTHON_DIR, "..", "include", "kiln.h")


def test_kiln_library_takes_precedence(monkeypatch):
    monkeypatch.setenv("KILN_LIBRARY", "/some/where/libkiln.so")
    assert _lib.candidates() == ["/some/where/libkiln.so"]
    monkeypatch.delenv("KILN_LIBRARY")
    found = _lib.candidates()
    pkg = os.path.dirname(os.path.abspath(_lib.__file__))
    assert found[0] == os.path.join(pkg, "libkiln.so")  # next to the package first
    assert found[1] == os.path.join(os.path.dirname(os.path.dirname(pkg)), "build", "libkiln.so")
    assert all(re.search(r"build-[^/]*/libkiln\.so$", p) for p in found[2:])


def test_loaded_library_is_the_one_asked_for():
    if os.environ.get("KILN_LIBRARY"):
        assert kiln.library_path == os.environ["KILN_LIBRARY"]
    assert os.path.exists(kiln.library_path) or kiln.library_path == "libkiln.so.0"


def test_bad_kiln_library_is_a_clear_import_error():
    env = dict(os.environ, KILN_LIBRARY="/nonexistent/libkiln.so", PYTHONPATH=PYTHON_DIR)
    r = subprocess.run([sys.executable, "-c", "import kiln"], env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert "ImportError: kiln: KILN_LIBRARY=/nonexistent/libkiln.so could not be loaded" in r.stderr


def test_version_matches_header():
    v = kiln.version()
    assert kiln.__version__ == "%d.%d.%d" % v
    if os.path.exists(HEADER):
        text = open(HEADER, encoding="utf-8").read()
        want = tuple(int(re.search(rf"#define KILN_VERSION_{p} (\d+)", text).group(1))
                     for p in ("MAJOR", "MINOR", "PATCH"))
        assert v == want


def test_devices():
    assert kiln.device_count() >= 0
    assert isinstance(kiln.build_has_kernels(), bool)
    info = kiln.device_info("cpu")
    assert info["name"] == "CPU" and info["ordinal"] == -1 and info["sm_count"] >= 1
    with pytest.raises(kiln.KilnError, match="device_info"):
        kiln.device_info("tpu")


def test_no_gpu_is_a_kiln_error():
    if kiln.device_count() > 0:
        pytest.skip("a CUDA device is present")
    with pytest.raises(kiln.KilnError) as e:
        kiln.device_info("cuda:0")
    assert e.value.status in (kiln.Status.NO_DRIVER, kiln.Status.NO_DEVICE, kiln.Status.DRIVER_TOO_OLD)
    assert e.value.message


def test_kiln_error():
    e = kiln.KilnError(1, "kiln_matmul: a is NULL; pass a DLTensor")
    assert isinstance(e, Exception) and e.status is kiln.Status.INVALID_ARGUMENT
    assert str(e) == "KILN_ERROR_INVALID_ARGUMENT: kiln_matmul: a is NULL; pass a DLTensor"
    assert e.message == "kiln_matmul: a is NULL; pass a DLTensor"
    for s in kiln.Status:  # the Python names match the library's
        assert _lib.fn.status_string(int(s)).decode() == "KILN_" + ("OK" if s == 0 else "ERROR_" + s.name)


def test_opts_defaults_match_the_library():
    m = _lib.fn.matmul_opts_default()
    assert (m.algo, m.alpha, m.tile_n, m.stream_k, m.workspace, m.workspace_bytes) == (0, 1.0, 0, 0, None, 0)
    i = _lib.fn.matmul_int8_opts_default()
    assert (i.algo, i.scale, bool(i.row_scale), bool(i.col_scale)) == (0, 1.0, False, False)
    a = _lib.fn.attention_opts_default()
    assert (a.algo, a.scale, a.causal, a.deterministic) == (0, 0.0, 0, 0)
