#!/usr/bin/env python3
"""Prints compare.sh's results as two tables per (op, ranks): the median time and busbw of each
implementation at each size, with weft shm's (private buffers, and SharedBuffers: "shared") and
weft mpi's ratios to Open MPI and weft tcp's to
Gloo's C++ library and to torch's gloo (time: <1 is faster); then each one's best and 99th
percentile time, so that a tail shows. Above them, the machine's limits measured before and
after the sweep (machine_limits.cc), and below them each large message's busbw over one thread's
copy bandwidth."""
import collections
import os
import sys


def read(path, op=None):
    rows = {}
    if not os.path.exists(path):
        return rows
    with open(path) as lines:
        for line in lines:
            parts = line.split()  # op size time_us busbw best_us p99_us
            if len(parts) != 6 or (op and parts[0] != op):
                continue
            rows[(parts[0], int(parts[1]))] = tuple(float(p) for p in parts[2:])
    return rows


def limits(out):
    """{'before'|'after': {name: value}} from machine_limits' "limit name [MiB] value" lines."""
    found = {}
    for when in ("before", "after"):
        path = f"{out}/limits.{when}"
        if not os.path.exists(path):
            continue
        with open(path) as lines:
            for line in lines:
                parts = line.split()
                if parts and parts[0] == "limit":
                    found.setdefault(when, {})[" ".join(parts[1:-1])] = float(parts[-1])
    return found


def print_limits(found):
    for when, values in found.items():
        text = ", ".join(f"{name} {value:g}" for name, value in values.items())
        print(f"machine limits {when} the sweep: {text}")


def print_bound(impls, found, n):
    """shm's busbw at 16 and 64 MiB over the lower of the two copy bandwidths measured."""
    for name in ("shm", "shared"):
        for op in ("all_reduce", "broadcast"):
            for mib in (16, 64):
                copies = [v[f"copy_gbps {mib}"] for v in found.values() if f"copy_gbps {mib}" in v]
                t = impls[name].get((op, mib << 20))
                if copies and t:
                    copy = min(copies)
                    print(f"{op} {mib} MiB, {n} ranks: {name} busbw {t[1]:.2f} GB/s = "
                          f"{t[1] / copy:.2f} of one thread's copy ({copy:.2f} GB/s)")


def main(out):
    found = limits(out)
    print_limits(found)
    for n in (2, 4):
        impls = collections.OrderedDict()
        ops = ("all_reduce", "broadcast", "all_gather", "reduce_scatter", "barrier")
        for op in ops:
            for name in ("shm", "shared", "thread", "weftmpi", "tcp"):
                impls.setdefault(name, {}).update(read(f"{out}/{name}.{op}.{n}"))
        impls["ompi"] = read(f"{out}/mpi.{n}")
        impls["gloo"] = read(f"{out}/gloo.{n}")
        impls["gloocpp"] = read(f"{out}/gloocpp.{n}")
        for op in ops:
            sizes = sorted({s for rows in impls.values() for (o, s) in rows if o == op})
            if not sizes:
                continue
            print(f"\n{op}, {n} ranks: median time (us) / busbw (GB/s)")
            header = f"{'size':>10}" + "".join(f"{name:>20}" for name in impls)
            print(header + f"{'shm/ompi':>10}{'shrd/ompi':>10}{'wmpi/ompi':>10}{'tcp/glc':>10}"
                  f"{'tcp/gloo':>10}")
            for size in sizes:
                line = f"{size:>10}"
                for rows in impls.values():
                    t = rows.get((op, size))
                    line += f"{t[0]:>11.2f} /{t[1]:>6.2f}" if t else f"{'-':>20}"
                pairs = (("shm", "ompi"), ("shared", "ompi"), ("weftmpi", "ompi"),
                         ("tcp", "gloocpp"), ("tcp", "gloo"))
                for name, peer in pairs:
                    mine = impls[name].get((op, size))
                    theirs = impls[peer].get((op, size))
                    ok = mine and theirs and theirs[0] > 0
                    line += f"{mine[0] / theirs[0]:>10.2f}" if ok else f"{'-':>10}"
                print(line)
            print(f"{op}, {n} ranks: best / 99th percentile time (us)")
            print(f"{'size':>10}" + "".join(f"{name:>20}" for name in impls))
            for size in sizes:
                line = f"{size:>10}"
                for rows in impls.values():
                    t = rows.get((op, size))
                    line += f"{t[2]:>11.2f} /{t[3]:>7.1f}" if t else f"{'-':>20}"
                print(line)
        print()
        print_bound(impls, found, n)


if __name__ == "__main__":
    main(sys.argv[1])
