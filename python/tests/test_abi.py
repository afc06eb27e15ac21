"""The ctypes structures against kiln.h, compiled: every size and field offset must match."""
import ctypes
import os
import shutil
import subprocess

import pytest

from kiln import _lib

HEADER_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include")

STRUCTS = {  # C name -> ctypes class
    "DLDevice": _lib.DLDevice,
    "DLDataType": _lib.DLDataType,
    "DLTensor": _lib.DLTensor,
    "DLManagedTensor": _lib.DLManagedTensor,
    "DLPackVersion": _lib.DLPackVersion,
    "DLManagedTensorVersioned": _lib.DLManagedTensorVersioned,
    "kiln_device_info": _lib.kiln_device_info,
    "kiln_matmul_opts": _lib.kiln_matmul_opts,
    "kiln_matmul_int8_opts": _lib.kiln_matmul_int8_opts,
    "kiln_qweight": _lib.kiln_qweight,
    "kiln_matmul_int4_opts": _lib.kiln_matmul_int4_opts,
    "kiln_qkv_opts": _lib.kiln_qkv_opts,
    "kiln_attention_opts": _lib.kiln_attention_opts,
}
VALUES = {  # C enumerator -> the Python enum member that mirrors it
    **{f"KILN_MATMUL_{m.name}": m for m in _lib.MatmulAlgo},
    **{f"KILN_INT8_{m.name}": m for m in _lib.Int8Algo},
    **{f"KILN_INT4_{m.name}": m for m in _lib.Int4Algo},
    **{f"KILN_QKV_{m.name}": m for m in _lib.QkvAlgo},
    **{f"KILN_ATTENTION_{m.name}": m for m in _lib.AttentionAlgo},
    **{f"KILN_QFORMAT_{m.name}": m for m in _lib.QFormat},
}
ENUMS = ["DLDeviceType", "kiln_status", "kiln_matmul_algo", "kiln_int8_algo", "kiln_qformat",
         "kiln_attention_algo", "kiln_int4_algo", "kiln_qkv_algo"]


def test_struct_layouts_match_header(tmp_path):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc or not os.path.exists(os.path.join(HEADER_DIR, "kiln.h")):
        pytest.skip("needs a C compiler and include/kiln.h")
    lines = []
    for name, cls in STRUCTS.items():
        lines.append(f'printf("{name} size %zu align %zu\\n", sizeof({name}), _Alignof({name}));')
        for field, _ in cls._fields_:
            lines.append(f'printf("{name}.{field} %zu %zu\\n", offsetof({name}, {field}), '
                         f'sizeof((({name} *)0)->{field}));')
    for e in ENUMS:
        lines.append(f'printf("enum {e} %zu\\n", sizeof({e}));')
    for c in VALUES:
        lines.append(f'printf("{c} %d\\n", (int){c});')
    src = tmp_path / "abi.c"
    src.write_text("#include <stddef.h>\n#include <stdio.h>\n#include <kiln.h>\nint main(void) {\n"
                   + "\n".join(lines) + "\nreturn 0;\n}\n")
    exe = tmp_path / "abi"
    subprocess.run([cc, "-std=c17", "-I", HEADER_DIR, str(src), "-o", str(exe)], check=True)
    got = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()

    want = []
    for name, cls in STRUCTS.items():
        want.append(f"{name} size {ctypes.sizeof(cls)} align {ctypes.alignment(cls)}")
        for field, ftype in cls._fields_:
            want.append(f"{name}.{field} {getattr(cls, field).offset} {ctypes.sizeof(ftype)}")
    for e in ENUMS:
        want.append(f"enum {e} {ctypes.sizeof(ctypes.c_int)}")
    for c, member in VALUES.items():
        want.append(f"{c} {int(member)}")
    assert got == want
