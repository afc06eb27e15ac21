"""examples/readme_example.py — the README's Python example, byte for byte (tests/check_examples.sh
checks that) — run as written, in a fresh interpreter, as the README says:
`PYTHONPATH=python python3 examples/readme_example.py` (NumPy arrays: kiln's CPU path)."""
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("numpy")

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
EXAMPLE = os.path.join(ROOT, "examples", "readme_example.py")


def test_readme_example_runs_as_written():
    env = dict(os.environ)  # KILN_LIBRARY, when the test runner set it, picks this build's libkiln
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    r = subprocess.run([sys.executable, EXAMPLE], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    errors = {name: float(value) for name, value in re.findall(r"^(\w+)\s+relative error (\S+)$", r.stdout, re.M)}
    assert set(errors) == {"matmul", "matmul_int4", "attention"}, r.stdout
    assert errors["matmul"] <= 1e-4        # f32 output (SPEC §5)
    assert errors["matmul_int4"] <= 1e-4   # against the dequantized weight, f32 output
    assert errors["attention"] <= 2e-3     # f16 output
    assert ("KilnError: KILN_ERROR_INVALID_ARGUMENT: kiln_matmul: b has shape [256, 512] but a has K = 512"
            in r.stdout), r.stdout
