#!/usr/bin/python3
"""Fails when the configured build uses a Debian package that scripts/install-deps does not list.

Usage: deps_listed_test.py BUILD_DIR SOURCE_DIR [INSTALL_DEPS]   (INSTALL_DEPS defaults to
SOURCE_DIR/scripts/install-deps)

On a machine where everything happens to be installed, a package missing from install-deps
goes unnoticed until someone builds on a fresh one. So this test asks the configured build
which files it takes from outside the tree:
  - the absolute paths in BUILD_DIR/CMakeCache.txt (found packages' config files, libraries
    and include dirs, the compiler and tools);
  - every header the compiler read (Ninja's dependency log, .ninja_deps);
  - the libraries on the link lines in build.ninja, and those ldd resolves for the built
    executables;
asks dpkg which package owns each, and fails unless the owner is listed in install-deps or
is pulled in by a listed package (Depends/Pre-Depends, recursively, over installed packages).
Files no package owns (/usr/local, ...) fail too: a fresh machine would not have them.
"""
import collections
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile


def run(*cmd):  # stdout of cmd; a non-zero exit is fine (dpkg -S exits 1 when one path is unowned)
    return subprocess.run(cmd, capture_output=True, text=True).stdout


def listed_packages(install_deps):  # the words of its `packages=( ... )` array
    text = open(install_deps).read()
    body = re.search(r"^packages=\((.*?)^\)", text, re.M | re.S).group(1)
    return set(re.sub(r"#.*", "", body).split())


def closure(roots):  # roots and everything they pull in, among installed packages
    depends, providers = collections.defaultdict(set), collections.defaultdict(set)
    fmt = "${db:Status-Status}\t${Package}\t${Provides}\t${Pre-Depends}, ${Depends}\n"
    names = lambda field: re.findall(r"(?:^|[,|])\s*([a-z0-9][a-z0-9+.-]*)", field)
    for line in run("dpkg-query", "-W", "-f=" + fmt).splitlines():
        status, pkg, provides, deps = line.split("\t")
        if status == "installed":
            for name in [pkg] + names(provides):
                providers[name].add(pkg)
            depends[pkg].update(names(deps))  # every alternative of `a | b`: those installed
    seen, todo = set(), [p for r in roots for p in providers[r]]
    while todo:
        pkg = todo.pop()
        if pkg not in seen:
            seen.add(pkg)
            todo += [p for d in depends[pkg] for p in providers[d]]
    return seen


def used_files(build, source):  # {path outside the tree: why the build uses it}
    used = {}
    cache = open(os.path.join(build, "CMakeCache.txt")).read()
    for name, kind, value in re.findall(r"^(\w+):(PATH|FILEPATH|INTERNAL)=(.*)$", cache, re.M):
        if name.startswith("CMAKE_INSTALL_") or (
                kind == "INTERNAL" and name not in ("CMAKE_COMMAND", "CMAKE_CTEST_COMMAND")):
            continue  # install destinations, not inputs; INTERNAL: only the cmake binaries
        for path in value.split(";"):
            if name.endswith("_DIR") and os.path.isdir(path):  # config-file package: its config
                pkg = name[:-4]
                configs = [os.path.join(path, f) for f in (pkg + "Config.cmake",
                                                           pkg.lower() + "-config.cmake")]
                path = next((c for c in configs if os.path.exists(c)), path)
            used.setdefault(path, f"CMakeCache.txt: {name}")

    # Ninja's deps log, read from a copy (`ninja -t deps` may truncate or recompact the log it
    # reads, and another ninja may be writing this one) next to the real manifest.
    if not os.path.exists(os.path.join(build, ".ninja_deps")):
        sys.exit(f"deps_listed_test: no {build}/.ninja_deps: build the tree (with Ninja) first")
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(os.path.join(build, ".ninja_deps"), tmp)
        for f in ("build.ninja", "CMakeFiles"):  # build.ninja includes CMakeFiles/rules.ninja
            os.symlink(os.path.join(os.path.abspath(build), f), os.path.join(tmp, f))
        target = None
        for line in run("ninja", "-C", tmp, "-t", "deps").splitlines():
            if not line.startswith(" "):
                target = line.split(":")[0]
            elif line.strip():
                used.setdefault(line.strip(), f"included by {target}")
    if not any(v.startswith("included by") for v in used.values()):
        sys.exit(f"deps_listed_test: no headers in {build}/.ninja_deps: build the tree first")

    compiler = re.search(r"^CMAKE_CXX_COMPILER:FILEPATH=(.*)$", cache, re.M).group(1)
    @functools.cache
    def lib_path(name):  # the file the compiler's linker takes for -l<name>
        for f in (f"lib{name}.so", f"lib{name}.a"):
            path = run(compiler, f"-print-file-name={f}").strip()
            if path.startswith("/"):  # not found: it prints the bare name back
                return os.path.normpath(path)
        return name
    target = None
    for line in open(os.path.join(build, "build.ninja")):
        if line.startswith("build "):
            target = line.split()[1].rstrip(":")
        elif line.startswith("  LINK_LIBRARIES = "):
            for lib in line.split()[2:]:
                if lib.startswith("-l"):
                    lib = lib_path(lib[2:])
                if lib.startswith("/"):
                    used.setdefault(lib, f"linked into {target}")

    def is_elf_executable(f):  # a file may vanish while another build or test runs
        try:
            return os.access(f, os.X_OK) and open(f, "rb").read(4) == b"\x7fELF"
        except OSError:
            return False
    # The build's own files: links (the tests' scratch folders link back into the tree, and
    # virtual environments to the interpreter) are not followed.
    elves = [os.path.join(d, f) for d, _, files in os.walk(build) if "/CMakeFiles" not in d
             for f in files if not os.path.islink(os.path.join(d, f))
             and is_elf_executable(os.path.join(d, f))]
    exe = os.path.relpath(elves[0], build) if elves else None  # ldd names it only if several
    for line in run("ldd", *elves).splitlines() if elves else []:
        if not line.startswith("\t"):
            exe = os.path.relpath(line.rstrip(":"), build)
        elif m := re.search(r"(?:=> )?(/\S+) \(0x", line):
            used.setdefault(m.group(1), f"loaded by {exe}")

    inside = lambda p: any(os.path.realpath(p).startswith(os.path.realpath(t) + "/")
                           for t in (build, source))
    return {p: why for p, why in used.items()
            if p.startswith("/") and os.path.exists(p) and not inside(p)}


def owners(paths):  # {path: set of owning packages}; tries the real path and merged-/usr forms
    forms = {}
    for path in paths:
        f = list(dict.fromkeys([path, os.path.realpath(path)]))
        forms[path] = f + [p[4:] if p.startswith("/usr/") else "/usr" + p for p in f]
    owner = collections.defaultdict(set)
    queries = sorted({f for fs in forms.values() for f in fs})
    for line in run("dpkg", "-S", *queries).splitlines():
        m = re.match(r"(.+?): (/.*)$", line)
        if m and not line.startswith("diversion by "):
            owner[m.group(2)].update(p.split(":")[0] for p in m.group(1).split(", "))
    return {path: next((owner[f] for f in fs if owner[f]), set()) for path, fs in forms.items()}


def main():
    build, source = sys.argv[1], sys.argv[2]
    install_deps = sys.argv[3] if len(sys.argv) > 3 else f"{source}/scripts/install-deps"
    listed = listed_packages(install_deps)
    allowed = closure(listed)
    used = used_files(build, source)
    missing, unowned = collections.defaultdict(list), []
    for path, pkgs in sorted(owners(used).items()):
        if not pkgs:
            unowned.append(path)
        elif not pkgs & allowed:
            missing[" | ".join(sorted(pkgs))].append(path)
    if not missing and not unowned:
        print(f"deps_listed_test: the {len(used)} files the build uses from outside the tree "
              f"all come from {install_deps}'s packages or their dependencies")
        return 0
    for pkgs, paths in sorted(missing.items()):
        more = f" (and {len(paths) - 1} more)" if len(paths) > 1 else ""
        print(f"error: {paths[0]} ({used[paths[0]]}){more} comes from package {pkgs}, "
              f"which {install_deps} does not list")
    for path in unowned:
        print(f"error: {path} ({used[path]}) belongs to no Debian package: a fresh machine "
              f"will not have it. Use a Debian package's instead, and list that package.")
    if missing:
        print(f"Add to the packages=( ... ) list in {install_deps}, with what weft needs it for:")
        for pkgs in sorted(missing):
            print(f"  {pkgs.split(' | ')[0]:<17} # ...")
    not_installed = sorted(listed - allowed)
    if not_installed:
        print(f"(listed but not installed: {' '.join(not_installed)}; run scripts/install-deps)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
