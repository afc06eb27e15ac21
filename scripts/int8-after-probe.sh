#!/bin/sh
# Builds scripts/probes/int8_after.cu (issue 5: kiln's int8 kernel after cuBLAS's) against a
# build's libkiln.so, into that build's slim copy: scripts/int8-after-probe.sh BUILD SLIM
# (e.g. build90 build-ladder/slim/main, after scripts/slim-build.sh build90 build-ladder/slim/main).
# On the device: SLIM/tools/int8_after [M N K] [rounds].
set -e
build=${1:?usage: int8-after-probe.sh BUILD SLIM}
slim=${2:?usage: int8-after-probe.sh BUILD SLIM}
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
"$nvcc" -std=c++17 -arch=sm_90a -O2 -Iinclude -Xcompiler -Wall scripts/probes/int8_after.cu -o "$slim/tools/int8_after" \
  -L"$build" -lkiln -lcublas -Xlinker -rpath='$ORIGIN/..'
echo "built $slim/tools/int8_after"
