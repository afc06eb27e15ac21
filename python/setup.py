"""Copies the built libkiln.so into the package (pure Python otherwise: no compiler runs here).

The library is taken from KILN_LIBRARY, else the repository's build tree (build/, then the
newest build-*/ that is not a sanitizer build), else a libkiln.so already in kiln/. Without one
the package installs anyway and looks for the library at import time.
"""
import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def built_library():
    env = os.environ.get("KILN_LIBRARY")
    if env:
        return env
    first = os.path.join(REPO, "build", "libkiln.so")
    if os.path.exists(first):
        return first
    found = []
    for p in glob.glob(os.path.join(REPO, "build-*", "libkiln.so")):
        try:
            with open(os.path.join(os.path.dirname(p), "CMakeCache.txt"), errors="replace") as f:
                if "KILN_SANITIZE:BOOL=ON" in f.read():
                    continue
        except OSError:
            pass
        found.append(p)
    return max(found, key=os.path.getmtime) if found else None


class BuildPy(build_py):
    def run(self):
        super().run()
        lib = built_library()
        if lib:
            dest = os.path.join(self.build_lib, "kiln", "libkiln.so")
            shutil.copyfile(os.path.realpath(lib), dest)
            print(f"kiln: bundling {lib}")
        else:
            print("kiln: no built libkiln.so found; the package will look for one at import time")


setup(cmdclass={"build_py": BuildPy})
