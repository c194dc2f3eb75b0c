"""The browser tab's icon for ``--web``: a tide gauge (a post with marks, water at its foot).

Drawn here as pixels and encoded as a PNG inside an ICO, so nothing is fetched or shipped
as a binary file; built once, on the first request.
"""

from __future__ import annotations

import functools
import struct
import zlib

SIZE = 32
_BACKGROUND = (18, 24, 38, 255)
_POST = (230, 233, 240, 255)
_WARNING = (240, 180, 40, 255)  # the warning line
_COMPACT = (235, 80, 70, 255)  # where the agent compacts
_WATER = (40, 140, 230, 255)


def _pixel(x: int, y: int) -> tuple[int, int, int, int]:
    if y >= 21:  # the water, to two thirds of the post
        return _WATER
    if 14 <= x <= 17 and y >= 3:
        return _POST
    if y == 6 and 8 <= x <= 23:
        return _COMPACT
    if y == 11 and 10 <= x <= 21:
        return _WARNING
    if y in (16,) and 12 <= x <= 19:
        return _POST
    return _BACKGROUND


def _png() -> bytes:
    rows = b"".join(b"\x00" + b"".join(bytes(_pixel(x, y)) for x in range(SIZE)) for y in range(SIZE))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", SIZE, SIZE, 8, 6, 0, 0, 0)  # 8-bit RGBA
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")


@functools.cache
def favicon_ico() -> bytes:
    """An ICO holding one 32×32 PNG image (every browser since 2010 reads PNG inside ICO)."""
    png = _png()
    directory = struct.pack("<HHH", 0, 1, 1)
    entry = struct.pack("<BBBBHHII", SIZE, SIZE, 0, 0, 1, 32, len(png), 6 + 16)
    return directory + entry + png
