#!/usr/bin/python3
"""Runs the shell commands of a Markdown file's ```sh blocks as a reader would paste them, so
that a stale flag, tool or path fails the test:

    run_doc_commands.py [--check-only] SOURCE_DIR BUILD_DIR WORK_DIR FILE.md...

Each block runs in bash (-e, -o pipefail; with the NAME=value lines of the blocks before it,
which the reader's shell would still hold) in WORK_DIR, a scratch folder that links to the
source tree's files (data/ file by file) and has BUILD_DIR as build/release/, so that what a
command writes (checkpoints/, out/, data/shards) stays out of the tree; HOME is WORK_DIR too. Blocks run in the file's
order, as a reader goes (a resume follows the run it resumes). Shortened for a test: every
weft-train run trains 2 steps (the debug model's), weft-generate writes 20 tokens; `make ...`
lines are left out (CI runs make test itself), and so is a block whose first line is
`# not run by the doc test: REASON`. A command of a program that is not installed here (srun,
torchfrtrace: a bare name not on PATH) is left out and reported; a path that does not exist
fails.

With --check-only (the benchmark documents, whose commands run for minutes to hours) each
command is checked instead of run: every path of the tree it names exists, a Google Benchmark
program lists at least one benchmark for the command's flags (--benchmark_list_tests), a
shell script parses (bash -n) and a Python script compiles.
"""
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

args = sys.argv[1:]
check_only = args[:1] == ["--check-only"]
if check_only:
    args = args[1:]
source, build, work = (pathlib.Path(p).resolve() for p in args[:3])
files = [pathlib.Path(p) for p in args[3:]]
TREE_PATH = re.compile(r"^(build/release|bench|configs|tools|data|scripts|tests)/\S+$")


def blocks(markdown):
    """The ```sh blocks of a Markdown text, as (line number, text)."""
    out, lines, start = [], None, 0
    for n, line in enumerate(markdown.splitlines(), 1):
        if lines is None and line.strip() == "```sh":
            lines, start = [], n
        elif lines is not None and line.strip() == "```":
            out.append((start, "\n".join(lines)))
            lines = None
        elif lines is not None:
            lines.append(line)
    return out


def shortened(command):
    """One logical command line, shortened for the test."""
    if "weft-train" in command and "--describe" not in command and "--help" not in command:
        command = re.sub(r"\s--training\.steps[ =]\d+", "", command)
        # The program, not a build target of that name (cmake --target weft-train).
        command = re.sub(r"(?<!--target )(\b[\w./-]*weft-train)(\s)", r"\1 --training.steps 2\2",
                         command, count=1)
    if "weft-generate" in command:
        command = re.sub(r"--max-new-tokens \d+", "--max-new-tokens 20", command)
    return command


def program(command):
    """The program a command line runs: its first word after NAME=value assignments."""
    try:
        words = shlex.split(command)
    except ValueError:  # an unbalanced quote: the shell will say so
        words = command.split()
    words = [w for w in words if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", w)]
    return words[0] if words else ""


def commands(block):
    """The block's logical lines (continuations joined), `make` lines and programs not
    installed here left out."""
    joined = re.sub(r"\\\n", " ", block)
    out = []
    for line in joined.splitlines():
        code = line.split("  #")[0].strip() if not line.lstrip().startswith("#") else ""
        name = program(code)
        if not code or code.startswith("make "):
            continue
        if (not check_only and name and "/" not in name and "$" not in name
                and shutil.which(name) is None):
            print(f"   (left out, {name} is not installed here: {code})", flush=True)
            continue
        out.append(shortened(code))
    return out


def check(command):
    """What is wrong with a command that --check-only does not run, or None."""
    words = [w.strip("'\"") for w in command.split()]
    for w in words:
        if TREE_PATH.match(w) and not (work / w).exists():
            return f"{w} does not exist"
    name = program(command)
    if name.startswith("build/release/bench/"):
        flags = [w for w in command.split()[1:] if w.startswith("--benchmark_")]
        listed = subprocess.run(["bash", "-c", " ".join([name, *flags, "--benchmark_list_tests"])],
                                cwd=work, capture_output=True, text=True, timeout=60)
        if listed.returncode != 0 or not listed.stdout.strip():
            return f"{name} lists no benchmark for these flags: {listed.stderr[-500:]}"
    elif name.endswith(".sh") and (work / name).exists():
        parsed = subprocess.run(["bash", "-n", name], cwd=work, capture_output=True, text=True)
        if parsed.returncode != 0:
            return f"{name} does not parse: {parsed.stderr[-500:]}"
    elif name.endswith(".py") and (work / name).exists():
        compiled = subprocess.run([sys.executable, "-c", "import ast, sys; ast.parse(open(sys.argv[1]).read())",
                                   name], cwd=work, capture_output=True, text=True)
        if compiled.returncode != 0:
            return f"{name} does not compile: {compiled.stderr[-500:]}"
    return None


shutil.rmtree(work, ignore_errors=True)
(work / "build").mkdir(parents=True)
(work / "build" / "release").symlink_to(build)
for entry in source.iterdir():
    if entry.name.startswith(".") or entry.name in ("build", "checkpoints", "out", "hf", "data"):
        continue
    (work / entry.name).symlink_to(entry)
(work / "data").mkdir()
for entry in (source / "data").iterdir():
    (work / "data" / entry.name).symlink_to(entry)
failures = 0
for f in files:
    assignments = []  # NAME=value lines of earlier blocks: the reader's shell keeps them
    for line, block in blocks(f.read_text()):
        if block.startswith("# not run by the doc test:"):
            continue
        lines = commands(block)
        if not lines:
            continue
        script = "\n".join(assignments + lines)
        assignments += [c for c in lines if re.fullmatch(r"[A-Z_]+=\S+", c)]
        where = f"{f.name}:{line}"
        if check_only:
            for command in lines:
                problem = check(command)
                print(f"== {where}: {command}: {problem or 'ok'}", flush=True)
                failures += problem is not None
            continue
        print(f"== {where}\n{script}", flush=True)
        run = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=work,
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                             timeout=600, env={**os.environ, "HOME": str(work), "OMPI_ALLOW_RUN_AS_ROOT": "1",
                                                  "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
        if run.returncode != 0:
            failures += 1
            print(f"FAILED ({where}, exit {run.returncode}):\n{run.stdout[-3000:]}"
                  f"{run.stderr[-3000:]}", flush=True)
sys.exit(1 if failures else 0)
