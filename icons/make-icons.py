#!/usr/bin/env python3
"""Draws the idemgate icon (a ledger page with a check mark, on indigo) as RGBA PNGs, with the
standard library only. Run from this folder; the PNGs are checked in."""
import struct
import zlib


def png(path, size):
    def px(x, y):
        u, v = x / size, y / size
        r = 0.18
        # rounded square background
        cx, cy = min(max(u, r), 1 - r), min(max(v, r), 1 - r)
        if (u - cx) ** 2 + (v - cy) ** 2 > r * r:
            return (0, 0, 0, 0)
        bg = (49 + int(40 * v), 46 + int(30 * v), 129 + int(60 * v), 255)
        # page
        if 0.27 < u < 0.73 and 0.2 < v < 0.8:
            # lines on the page
            if 0.34 < u < 0.66 and any(abs(v - l) < 0.018 for l in (0.32, 0.42, 0.52)):
                return (160, 168, 200, 255)
            # check mark
            d1 = abs((v - 0.66) - (u - 0.42)) if 0.36 < u < 0.46 else 9
            d2 = abs((v - 0.72) + (u - 0.46) * 0.9) if 0.45 < u < 0.64 else 9
            if min(d1, d2) < 0.035 and v > 0.55:
                return (22, 163, 74, 255)
            return (248, 250, 252, 255)
        return bg

    raw = b"".join(b"\x00" + b"".join(struct.pack("4B", *px(x, y)) for x in range(size)) for y in range(size))
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


for name, size in [("32x32.png", 32), ("128x128.png", 128), ("128x128@2x.png", 256), ("icon.png", 512)]:
    png(name, size)
