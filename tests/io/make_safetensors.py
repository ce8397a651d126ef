#!/usr/bin/env python3
"""Writes tests/io/ref.safetensors by the published safetensors layout, with json and struct
only (no safetensors package): an 8-byte little-endian header length, the JSON header padded
with spaces to a multiple of 8, then the raw little-endian data. tests/unit/test_io.c loads the
file and checks every value listed here.

    /usr/bin/python3 tests/io/make_safetensors.py   # rewrites tests/io/ref.safetensors
"""
import json
import os
import struct


def bf16(x):
    """bfloat16 bits of a float that bfloat16 holds exactly (the top half of its f32 bits)."""
    return struct.unpack("<I", struct.pack("<f", x))[0] >> 16


# name -> (dtype, shape, struct format char, values)
TENSORS = [
    ("weight", "F32", [2, 3], "f", [1.5, -2.0, 3.25, 0.0, 1e-3, -7.0]),
    ("bias", "F64", [3], "d", [0.1, -0.2, 1e100]),
    ("half", "F16", [2, 2], "e", [1.0, -0.5, 65504.0, 2.0 ** -14]),
    ("brain", "BF16", [3], "H", [bf16(1.0), bf16(-3.5), bf16(256.0)]),
    ("steps", "I64", [2], "q", [-(2 ** 40), 2 ** 62]),
    ("ids", "I32", [2, 2], "i", [1, -2, 2 ** 31 - 1, -(2 ** 31)]),
    ("shorts", "I16", [3], "h", [-32768, 0, 32767]),
    ("bytes", "I8", [4], "b", [-128, -1, 1, 127]),
    ("pixels", "U8", [2, 2, 1], "B", [0, 1, 128, 255]),
    ("mask", "BOOL", [3], "B", [1, 0, 1]),
    ("scalar", "F32", [], "f", [42.0]),
    ("empty", "F32", [0, 3], "f", []),
]


def main():
    header, data = {}, b""
    for name, dtype, shape, fmt, values in TENSORS:
        raw = struct.pack("<" + fmt * len(values), *values)
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    header["__metadata__"] = {"format": "pt", "writer": "tests/io/make_safetensors.py"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref.safetensors")
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
    print("wrote", out, 8 + len(text) + len(data), "bytes")


if __name__ == "__main__":
    main()
