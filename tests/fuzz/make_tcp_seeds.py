#!/usr/bin/env python3
"""Writes the seed corpora of tcp_frame_fuzz (streams of tcp transport frames: messages in
one or several segments, heartbeats, aborts, and broken frames) and tcp_handshake_fuzz (a
dialer's hello for either side, and random proofs). The wire format is docs/COLLECTIVES.md's
"The tcp transport". Run from the repository root; the output is checked in."""
import os
import struct

FRAMES = "tests/fuzz/corpus/tcp_frame_fuzz"
HANDSHAKES = "tests/fuzz/corpus/tcp_handshake_fuzz"
MAGIC = 0x32544657
DATA, ABORT, HEARTBEAT = 0, 1, 2


def frame(kind, tag, total, offset, payload):
    return struct.pack("<IIQQQQ", MAGIC, kind, tag, total, offset, len(payload)) + payload


def message(tag, payload, segment=None):
    segment = segment or max(len(payload), 1)
    if not payload:
        return frame(DATA, tag, 0, 0, b"")
    return b"".join(frame(DATA, tag, len(payload), o, payload[o:o + segment])
                    for o in range(0, len(payload), segment))


frames = {
    "three_messages": message(1, b"A" * 8) + message(2, b"B" * 8) + message(3, b"C" * 8)
    + message(4, b""),
    "segmented": message(1, bytes(range(8)), 3) + message(2, b"x" * 8, 5),
    "heartbeats": frame(HEARTBEAT, 0, 0, 0, b"") * 3 + message(1, b"h" * 8),
    "abort": message(1, b"z" * 8) + frame(ABORT, 0, 12, 0, b"rank 1 died!"),
    "wrong_size": message(1, b"y" * 12),
    "same_tag_twice": message(1, b"1" * 8) + message(1, b"2" * 8),
    "out_of_order": frame(DATA, 1, 8, 4, b"late") + frame(DATA, 1, 8, 0, b"soon"),
    "huge_length": struct.pack("<IIQQQQ", MAGIC, DATA, 1, 1 << 40, 0, 1 << 19),
    "bad_magic": struct.pack("<IIQQQQ", 0x12345678, DATA, 1, 8, 0, 8) + b"m" * 8,
    "truncated": message(2, b"t" * 8)[:30],
}
os.makedirs(FRAMES, exist_ok=True)
for name, data in frames.items():
    with open(os.path.join(FRAMES, name), "wb") as f:
        f.write(data)

HELLO, VERSION = 0x48544657, 2
hello = struct.pack("<IIii", HELLO, VERSION, 2, 4)
handshakes = {
    "listener_good_hello": b"\x00" + hello + bytes(16) + bytes(32),
    "listener_bad_version": b"\x00" + struct.pack("<IIii", HELLO, 1, 2, 4) + bytes(48),
    "listener_wrong_world": b"\x00" + struct.pack("<IIii", HELLO, VERSION, 2, 5) + bytes(48),
    "dialer_proof_and_ack": b"\x01" + bytes(range(48)) + struct.pack("<Ii", 0x41544657, 0),
    "dialer_short": b"\x01" + bytes(20),
}
os.makedirs(HANDSHAKES, exist_ok=True)
for name, data in handshakes.items():
    with open(os.path.join(HANDSHAKES, name), "wb") as f:
        f.write(data)
