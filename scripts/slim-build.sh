#!/bin/sh
# Copies what a GPU session needs from a build directory (libkiln.so, test programs, tools,
# fatbins for the SASS report, CTest files, libcmocka) into DEST, small enough for the device
# tool's 64 MiB carry limit: scripts/slim-build.sh build build-ladder/slim/main
set -e
src=${1:-build}
dest=${2:-build-ladder/slim/main}
rm -rf "$dest"
mkdir -p "$dest/tests" "$dest/tools" "$dest/kernels"
cp -a "$src"/libkiln.so* "$dest/"
cp -L /usr/lib/x86_64-linux-gnu/libcmocka.so.0 "$dest/"
for f in "$src"/tests/test_* "$src"/tests/dlpack_coexist; do [ -x "$f" ] && [ -f "$f" ] && cp "$f" "$dest/tests/"; done
for f in kiln-bench kiln-demo; do [ -f "$src/tools/$f" ] && cp "$src/tools/$f" "$dest/tools/"; done
cp "$src"/kernels/*.fatbin "$dest/kernels/"
du -sh "$dest"
