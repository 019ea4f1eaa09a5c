"""A small PNG reader for the screenshot tests (zlib and numpy only, no PIL).

read_png(path) -> numpy uint8 array (height, width, channels) for the 8-bit
non-interlaced PNGs a browser writes: greyscale, RGB, grey+alpha or RGBA.
"""

import struct
import zlib

import numpy as np

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}  # colour type -> samples per pixel


def _chunks(data):
    pos = len(SIGNATURE)
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        crc = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])[0]
        if zlib.crc32(kind + body) != crc:
            raise ValueError(f"PNG chunk {kind!r}: bad CRC")
        yield kind, body
        pos += 12 + length


def _paeth_row(line, prev, bpp):
    """Undo the Paeth filter in place (the one filter that must go byte by byte)."""
    for x in range(len(line)):
        a = line[x - bpp] if x >= bpp else 0
        b = prev[x]
        c = prev[x - bpp] if x >= bpp else 0
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
        line[x] = (line[x] + pred) & 0xFF


def read_png(path):
    with open(path, "rb") as f:
        data = f.read()
    if not data.startswith(SIGNATURE):
        raise ValueError(f"{path}: not a PNG file")
    header, idat = None, bytearray()
    for kind, body in _chunks(data):
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    if header is None:
        raise ValueError(f"{path}: no IHDR chunk")
    width, height, depth, colour_type, _, _, interlace = header
    if depth != 8 or colour_type not in CHANNELS or interlace:
        raise ValueError(f"{path}: unsupported PNG (bit depth {depth}, colour type {colour_type}, "
                         f"interlace {interlace})")
    bpp = CHANNELS[colour_type]
    stride = width * bpp
    raw = zlib.decompress(bytes(idat))
    if len(raw) != height * (stride + 1):
        raise ValueError(f"{path}: {len(raw)} bytes of image data, expected {height * (stride + 1)}")
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(height, stride + 1)
    out = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.uint8)
    for y in range(height):
        kind, line = rows[y, 0], rows[y, 1:]
        if kind == 0:    # None
            cur = line.copy()
        elif kind == 1:  # Sub: running sum along each channel, modulo 256
            cur = (np.cumsum(line.reshape(width, bpp).astype(np.uint32), axis=0) & 0xFF)
            cur = cur.astype(np.uint8).reshape(stride)
        elif kind == 2:  # Up
            cur = line + prev  # uint8 arithmetic wraps modulo 256
        elif kind == 3:  # Average: depends on the byte to the left, so byte by byte
            buf, up = bytearray(line.tobytes()), prev.tobytes()
            for x in range(stride):
                left = buf[x - bpp] if x >= bpp else 0
                buf[x] = (buf[x] + ((left + up[x]) >> 1)) & 0xFF
            cur = np.frombuffer(bytes(buf), dtype=np.uint8)
        elif kind == 4:  # Paeth
            buf = bytearray(line.tobytes())
            _paeth_row(buf, prev.tobytes(), bpp)
            cur = np.frombuffer(bytes(buf), dtype=np.uint8)
        else:
            raise ValueError(f"{path}: row {y} has unknown filter type {kind}")
        out[y] = cur
        prev = cur
    return out.reshape(height, width, bpp)


def rgb(image):
    """The (height, width, 3) colour part of an image (grey repeated, alpha dropped)."""
    if image.shape[2] in (1, 2):
        return np.repeat(image[:, :, :1], 3, axis=2)
    return image[:, :, :3]


def distinct_colours(image):
    """The number of distinct RGB colours in an image."""
    flat = rgb(image).reshape(-1, 3).astype(np.uint32)
    return len(np.unique((flat[:, 0] << 16) | (flat[:, 1] << 8) | flat[:, 2]))


def has_colour(image, colour, tolerance=2):
    """True when some pixel is within `tolerance` of colour (r, g, b) in every channel."""
    diff = np.abs(rgb(image).astype(np.int32) - np.asarray(colour, dtype=np.int32))
    return bool(np.any(np.all(diff <= tolerance, axis=2)))
