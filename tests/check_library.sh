#!/bin/sh
# Checks libkiln.so: it imports no CUDA symbol (the driver is dlopen'ed), links no CUDA library,
# and does not ask for an executable stack.
lib="$1"
fail=0
cu=$(nm -D --undefined-only "$lib" | awk '{print $NF}' | grep -E '^cu' || true)
if [ -n "$cu" ]; then echo "FAIL: $lib imports CUDA symbols: $cu"; fail=1; else echo "ok: no cu* imports"; fi
deps=$(ldd "$lib" | grep -Ei 'cuda|cublas|nvrtc' || true)
if [ -n "$deps" ]; then echo "FAIL: $lib links CUDA libraries: $deps"; fail=1; else echo "ok: no CUDA library in ldd"; fi
stack=$(readelf -lW "$lib" | grep GNU_STACK || true)
case "$stack" in
  *RWE*) echo "FAIL: executable stack: $stack"; fail=1 ;;
  "") echo "FAIL: no GNU_STACK header"; fail=1 ;;
  *) echo "ok: non-executable stack" ;;
esac
exit $fail
