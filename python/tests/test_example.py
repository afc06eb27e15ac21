"""examples/int4_attention_block.py, run by the test suite: a tiny attention block with kiln's INT4
fused QKV projection and attention against the PyTorch original on the dequantized weights. Its
main() runs on CUDA when a GPU (and a libkiln with kernels) is there, else on kiln's CPU path."""
import importlib.util
import os

import pytest

from conftest import torch_or_skip

torch = torch_or_skip(min_version=(2, 0))  # F.scaled_dot_product_attention; kiln's ops need no more

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "int4_attention_block.py")


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("int4_attention_block", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_main(example, capsys):
    assert example.main([]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "max abs error" in out
    assert f"device {'cuda' if example.gpu_available() else 'cpu'}" in out


def test_example_on_the_cpu(example):
    result = example.run("cpu", verbose=False)
    assert result["passed"], result
    assert result["rel_error"] < 1e-3  # kiln's CPU path rounds once, from double sums
