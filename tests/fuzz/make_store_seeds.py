#!/usr/bin/env python3
"""Writes the seed corpus of store_request_fuzz: well-formed TCPStore request streams (a
hello and a token proof (any proof: the fuzz target's server has no token), then requests of
every type), and a few broken ones.
The wire format is docs/STORES.md's. Run from the repository root; the output is checked in."""
import os
import struct
import zlib

OUT = "tests/fuzz/corpus/store_request_fuzz"
MAGIC, VERSION = 0x53544657, 2


def frame(kind, payload):
    return struct.pack("<IHHII", MAGIC, VERSION, kind, len(payload), zlib.crc32(payload)) + payload


def s(text):
    b = text.encode()
    return struct.pack("<I", len(b)) + b


def i64(v):
    return struct.pack("<q", v)


def keys(*names):
    return struct.pack("<I", len(names)) + b"".join(s(n) for n in names)


hello = frame(1, s("n" * 16)) + frame(10, s("m" * 32))
seeds = {
    "hello": hello,
    "hello_only": frame(1, s("n" * 16)),
    "short_nonce": frame(1, s("n" * 15)),
    "proof_before_hello": frame(10, s("m" * 32)),
    "request_after_hello": frame(1, s("n" * 16)) + frame(9, b""),
    "set_get": hello + frame(2, s("k") + s("v")) + frame(3, s("k") + i64(10)),
    "add": hello + frame(4, s("n") + i64(5)) + frame(4, s("n") + i64(-2)),
    "compare_set": hello + frame(5, s("c") + s("") + s("x")),
    "wait": hello + frame(2, s("a") + s("1")) + frame(6, keys("a", "b") + i64(5)),
    "check_delete_num": hello + frame(7, keys("a")) + frame(8, s("a")) + frame(9, b""),
    "request_before_hello": frame(2, s("k") + s("v")),
    "bad_crc": hello + struct.pack("<IHHII", MAGIC, VERSION, 2, 4, 0) + b"\0\0\0\0",
    "huge_length": hello + struct.pack("<IHHII", MAGIC, VERSION, 2, 0xFFFFFFF0, 0),
    "short_string": hello + frame(2, struct.pack("<I", 100) + b"ab"),
}
os.makedirs(OUT, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
print(f"{len(seeds)} seeds in {OUT}")
