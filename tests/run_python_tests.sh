#!/bin/sh
# Runs the Python bridge's tests (python/tests) against one libkiln, under the first interpreter
# that has what they need: $KILN_PYTHON, Debian's /usr/bin/python3 (where apt puts python3-numpy
# and python3-pytest), then python3 on PATH.
#   run_python_tests.sh cpu LIBKILN   NumPy tests (+ PyTorch CPU tests when torch >= 2.4 is there)
#   run_python_tests.sh gpu LIBKILN   test_gpu.py; needs PyTorch >= 2.4 with a visible CUDA GPU
# Exit 77 (skipped, with the reason) when no interpreter qualifies: never a silent pass.
mode=$1
lib=$2
root=$(cd "$(dirname "$0")/.." && pwd)
if [ "$mode" = gpu ]; then
  need='import pytest, torch, re, sys; v = tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", torch.__version__).groups()); sys.exit(0 if v >= (2, 4) and torch.cuda.is_available() else 1)'
  what="PyTorch >= 2.4 with a CUDA GPU, and pytest"
  tests="$root/python/tests/test_gpu.py"
else
  need='import numpy, pytest'
  what="NumPy and pytest (apt-get install python3-numpy python3-pytest)"
  tests="$root/python/tests --ignore=$root/python/tests/test_gpu.py"
fi
for py in "${KILN_PYTHON:-}" /usr/bin/python3 "$(command -v python3 2>/dev/null)"; do
  [ -n "$py" ] && [ -x "$py" ] || continue
  if "$py" -c "$need" >/dev/null 2>&1; then
    echo "kiln: python tests ($mode) with $py ($("$py" -c 'import sys; print(sys.version.split()[0])')), KILN_LIBRARY=$lib"
    # shellcheck disable=SC2086
    KILN_LIBRARY=$lib PYTHONDONTWRITEBYTECODE=1 exec "$py" -m pytest -q -rs -p no:cacheprovider $tests
  fi
done
echo "kiln: SKIP python tests ($mode): no interpreter with $what"
exit 77
