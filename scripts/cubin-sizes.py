#!/usr/bin/env python3
"""Per-kernel SASS instruction counts of one or two cubins, without cuobjdump (the build machine
has none): each kernel's .text section is its code, 16 bytes an instruction on sm_90. With two
cubins it says which kernels changed, so a kernel edit's cost (or its absence) shows before any
device time is spent. docs/performance.md, "Per-warpgroup key ranges", used it.

  nvcc -std=c++17 -O3 -cubin -arch=sm_90a -Ikernels kernels/NAME.cu -o new.cubin   (and old.cubin
  from the old source), then: scripts/cubin-sizes.py old.cubin new.cubin [NAME_FILTER]
"""
import struct
import sys


def kernel_texts(path):
    """{kernel name: .text bytes} of an ELF64 cubin."""
    data = open(path, "rb").read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    sections = []
    for i in range(shnum):
        name, _type, _flags, _addr, off, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        sections.append((name, off, size))
    names_off = sections[shstrndx][1]
    texts = {}
    for name, off, size in sections:
        end = data.index(b"\0", names_off + name)
        sname = data[names_off + name:end].decode()
        if sname.startswith(".text."):
            texts[sname[len(".text."):]] = data[off:off + size]
    return texts


def main(argv):
    cubins = [a for a in argv if a.endswith(".cubin")]
    filters = [a for a in argv if not a.endswith(".cubin")]
    if not 1 <= len(cubins) <= 2:
        sys.exit(__doc__)
    texts = [kernel_texts(c) for c in cubins]
    for kernel in sorted(set().union(*texts)):
        if filters and not any(f in kernel for f in filters):
            continue
        counts = " ".join(f"{len(t.get(kernel, b'')) // 16:6d}" for t in texts)
        same = "" if len(texts) == 1 else (" same" if texts[0].get(kernel) == texts[1].get(kernel) else " DIFF")
        print(f"{counts}{same}  {kernel}")


if __name__ == "__main__":
    main(sys.argv[1:])
