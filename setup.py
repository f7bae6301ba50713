"""Builds weft's Python package for pip (pyproject.toml has its metadata): the extensions
weft._weft and, where torch is installed, weft._torch are CMake targets, built here and put
beside python/weft's modules.

    pip install .                            # a virtual environment, or --user
    pip install --no-build-isolation .       # offline: setuptools and wheel already installed
    WEFT_BUILD_DIR=build/release pip install --no-build-isolation .   # reuse a configured build

Without WEFT_BUILD_DIR the build runs in build/pip with the release preset's settings (a few
minutes on 2 cores; ccache makes a second one quick). The extensions are built for the
interpreter running pip and link weft statically; they need Debian's oneDNN, OpenBLAS,
Highway and the other libraries scripts/install-deps installs at run time, and torch's for
weft._torch.
"""
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SOURCE = pathlib.Path(__file__).resolve().parent
BUILD_DIR = os.environ.get("WEFT_BUILD_DIR")


def with_torch():
    """Whether to build weft._torch: where the reused build has it, else where torch is
    installed for this interpreter."""
    if BUILD_DIR:
        cache = pathlib.Path(BUILD_DIR, "CMakeCache.txt")
        return cache.exists() and "WEFT_BUILD_TORCH:BOOL=ON" in cache.read_text()
    return importlib.util.find_spec("torch") is not None


class CMakeExtension(Extension):
    """An extension module that CMake's target `target` builds."""

    def __init__(self, name, target):
        super().__init__(name, sources=[])
        self.target = target


class CMakeBuild(build_ext):
    def run(self):
        if BUILD_DIR:
            build = pathlib.Path(BUILD_DIR).resolve()
            if not (build / "CMakeCache.txt").exists():
                sys.exit(f"setup.py: WEFT_BUILD_DIR={BUILD_DIR} is not a configured CMake build "
                         "(no CMakeCache.txt): configure it first (cmake --preset release), or "
                         "leave WEFT_BUILD_DIR unset to build in build/pip")
        else:
            build = SOURCE / "build" / "pip"
            subprocess.run(["cmake", "--preset", "release", "-B", str(build),
                            f"-DPython3_EXECUTABLE={sys.executable}",
                            f"-DWEFT_BUILD_TORCH={'ON' if with_torch() else 'OFF'}",
                            "-DWEFT_BUILD_TESTS=OFF", "-DWEFT_BUILD_BENCH=OFF",
                            "-DWEFT_BUILD_EXAMPLES=OFF"], cwd=SOURCE, check=True)
        subprocess.run(["cmake", "--build", str(build), "--target",
                        *[ext.target for ext in self.extensions]], check=True)
        for ext in self.extensions:
            built = sorted((build / "python" / "weft").glob(ext.name.split(".")[-1] + ".*.so"))
            if not built:
                sys.exit(f"setup.py: CMake built no {ext.name} under {build}/python/weft")
            target = pathlib.Path(self.get_ext_fullpath(ext.name))
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(built[-1], target)


extensions = [CMakeExtension("weft._weft", "weft_python")]
if with_torch():
    extensions.append(CMakeExtension("weft._torch", "weft_torch"))
setup(ext_modules=extensions, cmdclass={"build_ext": CMakeBuild})
