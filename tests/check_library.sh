#!/bin/sh
# Checks libkiln.so: it imports no CUDA symbol (the driver is dlopen'ed), links no CUDA library,
# does not ask for an executable stack, and exports every function kiln.h declares.
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
# Every function kiln.h declares with KILN_API is exported (a declaration without a definition
# would otherwise surface only as a caller's link error).
header="$(dirname "$0")/../include/kiln.h"
missing=""
for f in $(grep -E '^KILN_API' "$header" | grep -oE 'kiln_[a-z0-9_]+\(' | tr -d '('); do
  nm -D --defined-only "$lib" | awk '{print $NF}' | grep -qx "$f" || missing="$missing $f"
done
if [ -n "$missing" ]; then echo "FAIL: declared in kiln.h but not exported:$missing"; fail=1; else echo "ok: every KILN_API function is exported"; fi
exit $fail
