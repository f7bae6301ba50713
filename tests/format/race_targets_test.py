#!/usr/bin/env python3
"""Every test binary labelled "race" is one that `make race` builds under ThreadSanitizer.

ctest lists a binary's tests only once the binary is built, so one left out of the Makefile's
RACE_TARGETS is not a failure under TSan: it silently never runs there.

    race_targets_test.py SOURCE_DIR
"""
import pathlib
import re
import sys


def race_labelled(source):
    names = set()
    for lists in source.glob("tests/**/CMakeLists.txt"):
        for m in re.finditer(r"weft_cc_test\((\w+)(.*?)\)", lists.read_text(), re.S):
            if re.search(r"LABELS[^)]*\brace\b", m.group(2)):
                names.add(m.group(1))
    return names


def race_targets(source):
    m = re.search(r"^RACE_TARGETS := (.*)$", (source / "Makefile").read_text(), re.M)
    return set(m.group(1).split()) if m else set()


def main():
    source = pathlib.Path(sys.argv[1])
    labelled, built = race_labelled(source), race_targets(source)
    if not labelled:
        sys.exit("no test is labelled race: the pattern no longer matches tests/**/CMakeLists.txt")
    ok = True
    for name in sorted(labelled - built):
        print(f"{name} is labelled race but missing from the Makefile's RACE_TARGETS")
        ok = False
    for name in sorted(built - labelled):
        print(f"{name} is in RACE_TARGETS but no test binary of that name is labelled race")
        ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
