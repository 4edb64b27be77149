"""A JPEG's size and colour mode from its marker segments, without Pillow.

Pillow's JPEG open parses the markers in Python (about 25 µs a file); this walk from SOI to SOS
reads only what the GPU path needs. It answers only where it is sure to agree with Pillow's
`Image.open` (same size and mode, and Pillow would not refuse the header): None for anything else,
and the caller then asks Pillow.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from PIL import Image

_SEGMENT = struct.Struct(">BBH")  # 0xFF, the marker, the segment's length (itself included)
_SOI = b"\xff\xd8\xff"  # SOI and the next marker's first byte: what Pillow's JPEG plugin accepts
_SOF = (0xC0, 0xC1, 0xC2)  # baseline, extended and progressive Huffman frames
_SOS, _DQT = 0xDA, 0xDB
_SKIPPED = (0xC4, 0xDD, 0xFE)  # DHT, DRI, COM: Pillow skips them unread
_MODES = {1: "L", 3: "RGB"}  # Pillow's mode by component count (3 is "RGB" whatever APP14 says)


class Frame(NamedTuple):
    width: int
    height: int
    mode: str


def read_frame(data: bytes) -> Frame | None:
    """The frame of a JPEG whose segments up to SOS are all whole and ordinary; None otherwise."""
    if not data.startswith(_SOI):
        return None
    frame: Frame | None = None
    pos = 2
    while pos + 4 <= len(data):
        fill, marker, length = _SEGMENT.unpack_from(data, pos)
        end = pos + 2 + length
        if fill != 0xFF or length < 2 or end > len(data):
            return None
        if marker == _SOS:
            return frame
        if marker not in _SKIPPED:
            body = data[pos + 4 : end]
            if marker in _SOF and frame is None:
                frame = _frame(body)
                if frame is None:
                    return None
            elif not ((marker == _DQT and _tables_whole(body)) or _app_readable(marker, body)):
                return None
        pos = end
    return None


def _frame(body: bytes) -> Frame | None:
    """An 8-bit SOF with 1 or 3 components, a nonzero size below Pillow's decompression-bomb error."""
    if len(body) < 6 or body[0] != 8 or body[5] not in _MODES or len(body) != 6 + 3 * body[5]:
        return None
    height, width = int.from_bytes(body[1:3], "big"), int.from_bytes(body[3:5], "big")
    bomb = Image.MAX_IMAGE_PIXELS
    if width == 0 or height == 0 or (bomb is not None and width * height > 2 * bomb):
        return None
    return Frame(width, height, _MODES[body[5]])


def _tables_whole(body: bytes) -> bool:
    """Each quantization table is all there (Pillow refuses a short one)."""
    pos = 0
    while pos < len(body):
        pos += 1 + 64 * (1 if body[pos] >> 4 == 0 else 2)
    return pos == len(body)


def _app_readable(marker: int, body: bytes) -> bool:
    """An APPn segment Pillow reads without failing, and that does not make the file an MPO."""
    if not 0xE0 <= marker <= 0xEF:
        return False
    if (marker == 0xE0 and body.startswith(b"JFIF")) or (marker == 0xEE and body.startswith(b"Adobe")):
        return len(body) >= 7  # Pillow reads a 16-bit version at offset 5
    if marker == 0xE2 and body.startswith(b"ICC_PROFILE\0"):
        return len(body) >= 14  # the fragment's number and count, which Pillow reads at the SOF
    if marker == 0xE2 and body.startswith(b"MPF\0"):
        return False  # Pillow may open it as an MPO
    if marker == 0xED and body.startswith(b"Photoshop 3.0\0"):
        return _photoshop_readable(body)
    return True


def _photoshop_readable(body: bytes) -> bool:
    """Pillow walks APP13's 8BIM resource blocks, stopping quietly where a number runs past the end
    but failing where a block ends right before its name's length byte."""
    pos = 14
    while body[pos : pos + 4] == b"8BIM":
        pos += 6  # the signature and the resource code
        if pos > len(body):
            return True
        if pos == len(body):
            return False
        pos += 1 + body[pos]
        pos += (pos & 1) + 4
        if pos > len(body):
            return True
        pos += int.from_bytes(body[pos - 4 : pos], "big")
        pos += pos & 1
    return True
