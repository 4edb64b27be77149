"""trtpool.vision.images.jpeg_header (the marker walk of trtpool.vision.jpeg_frame) against Pillow's
own open: on JPEGs of every common kind, on third-party files, on truncated and corrupted copies,
and on non-JPEGs; then sort_files on a mixed list, whose answers must be those of the Pillow path."""
from __future__ import annotations

import functools
import importlib.util
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.harness.pipelines import awkward_images, bad_images, encoded, images, picture
from trtpool.vision.images import CropSpec, Header, ImageRefused, jpeg_header, opened, read_header, sort_files

SPEC = CropSpec.imagenet(224)
SOF0_RGB, SOF0_L = b"\xff\xc0\x00\x11\x08", b"\xff\xc0\x00\x0b\x08"  # Pillow's baseline frames, 8-bit


def pillow_header(data: bytes) -> Header:
    """The header as read_header gave it before jpeg_header: all through Pillow."""
    with Image.open(io.BytesIO(data)) as image:
        return Header(image.format or "unknown", *image.size, image.mode, b"\xff\xd9" in data[-4096:])


def segment(marker: int, body: bytes) -> bytes:
    return bytes([0xFF, marker]) + (len(body) + 2).to_bytes(2, "big") + body


def spliced(data: bytes, *segments: bytes) -> bytes:
    """The JPEG with these segments right after its SOI."""
    return data[:2] + b"".join(segments) + data[2:]


def resized_frame(data: bytes, width: int, height: int) -> bytes:
    """A Pillow baseline JPEG whose SOF says another size (only the header is read)."""
    at = next(data.index(sof) for sof in (SOF0_RGB, SOF0_L) if sof in data) + 5
    return data[:at] + height.to_bytes(2, "big") + width.to_bytes(2, "big") + data[at + 4 :]


@functools.cache
def third_party_jpegs() -> dict[str, bytes]:
    """Real photos shipped by packages the setup installs (JFIF, ICC, Photoshop APP13, EXIF, COM segments)."""
    def package(name: str) -> Path:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.submodule_search_locations, name
        return Path(spec.submodule_search_locations[0])

    paths = [package("matplotlib") / "mpl-data/sample_data/grace_hopper.jpg",
             package("sklearn") / "datasets/images/china.jpg", package("sklearn") / "datasets/images/flower.jpg"]
    return {path.name: path.read_bytes() for path in paths}


@functools.cache
def common_jpegs() -> dict[str, bytes]:
    """Baseline and progressive, RGB and L, qualities 10-95, 4:4:4 and 4:2:0, odd sizes: the fast path's own."""
    rng = np.random.default_rng(3)
    files = {}
    for size in ((1, 1), (7, 3), (333, 500), (64, 48)):
        photo = picture(rng, *size)
        for mode in ("RGB", "L"):
            for progressive in (False, True):
                for quality in (10, 50, 75, 95):
                    for subsampling in (0, 2):
                        files[f"{size} {mode} progressive={progressive} q{quality} ss{subsampling}"] = encoded(
                            photo.convert(mode), progressive=progressive, quality=quality, subsampling=subsampling)
    files["4000x3000"] = encoded(Image.new("RGB", (4000, 3000), (30, 120, 200)), quality=50)
    photo = picture(rng, 120, 90)
    exif = Image.Exif()
    exif[0x0112] = 6
    exif[0x010F] = "trtpool"
    files["exif"] = encoded(photo, exif=exif.tobytes())
    files["icc in 2 fragments"] = encoded(photo, icc_profile=bytes(rng.integers(0, 256, 70_000, dtype=np.uint8)))
    files["xmp"] = encoded(photo, xmp=b"<x:xmpmeta xmlns:x='adobe:ns:meta/'/>")
    files["comment"] = encoded(photo, comment=b"a comment")
    files["dpi"] = encoded(photo, dpi=(300, 300))
    files["restart every 2 blocks"] = encoded(photo, restart_marker_blocks=2)
    files["restart every row"] = encoded(photo.convert("L"), restart_marker_rows=1, progressive=True)
    files["optimized"] = encoded(photo, optimize=True)
    files["adobe transform 0"] = spliced(encoded(photo), segment(0xEE, b"Adobe\x00\x64\x00\x00\x00\x00\x00"))
    files["adobe transform 1"] = spliced(encoded(photo), segment(0xEE, b"Adobe\x00\x64\x00\x00\x00\x00\x01"))
    resolution = b"8BIM\x03\xed\x00\x00" + (16).to_bytes(4, "big") + bytes(16)
    iptc = b"8BIM\x04\x04\x00\x00" + bytes(4)  # an empty IPTC block
    files["photoshop"] = spliced(encoded(photo), segment(0xED, b"Photoshop 3.0\x00" + resolution + iptc))
    files["app15"] = spliced(encoded(photo), segment(0xEF, b"anything"))
    files["harness tiny"] = awkward_images()["tiny"]
    files["harness progressive"] = awkward_images()["progressive"]
    files["harness grayscale"] = awkward_images()["grayscale"]
    files["harness exif rotated"] = awkward_images()["exif_rotated"]
    files.update({f"harness {index}": data for index, data in enumerate(images(12, seed=7)) if data[:2] == b"\xff\xd8"})
    files.update(third_party_jpegs())
    return files


@functools.cache
def other_jpegs() -> dict[str, bytes]:
    """JPEGs the fast path may leave to Pillow: CMYK, MPO, odd frames, short or broken segments."""
    photo = picture(np.random.default_rng(4), 96, 64)
    plain = encoded(photo)
    mpo = io.BytesIO()
    photo.save(mpo, "MPO", save_all=True, append_images=[photo.convert("L").convert("RGB")])
    return {
        "cmyk": encoded(photo.convert("CMYK")),
        "harness cmyk": awkward_images()["cmyk"],
        "mpo": mpo.getvalue(),
        "12-bit": plain.replace(SOF0_RGB, SOF0_RGB[:-1] + b"\x0c"),
        "lossless frame": plain.replace(SOF0_RGB, b"\xff\xc3" + SOF0_RGB[2:]),
        "short jfif": spliced(plain, segment(0xE0, b"JFIF\x00")),
        "short adobe": spliced(plain, segment(0xEE, b"Adobe")),
        "short icc": spliced(plain, segment(0xE2, b"ICC_PROFILE\x00\x01")),
        "photoshop cut at a name": spliced(plain, segment(0xED, b"Photoshop 3.0\x008BIM\x04\x04")),
        "short quantization table": spliced(plain, segment(0xDB, bytes(30))),
        "fill bytes": plain[:2] + b"\xff" + plain[2:],
        "zero height": resized_frame(plain, 96, 0),
        "two frames": spliced(plain, segment(0xC0, b"\x08\x00\x10\x00\x20\x01\x01\x11\x00")),
        "no frame": plain[:2] + plain[plain.index(b"\xff\xda") :],
        "bomb": resized_frame(plain, 65535, 65535),
        "truncated": bad_images()["truncated"][0],
        "corrupt": bad_images()["corrupt"][0],
    }


@pytest.mark.parametrize("name", sorted(common_jpegs()))
def test_common_jpegs_take_the_fast_path_and_read_as_pillow_reads_them(name):
    data = common_jpegs()[name]
    assert jpeg_header(data) == pillow_header(data) == read_header(data, SPEC)


@pytest.mark.parametrize("name", sorted(other_jpegs()))
def test_other_jpegs_read_as_pillow_reads_them_or_are_left_to_it(name):
    data = other_jpegs()[name]
    header = jpeg_header(data)
    try:
        pillow = pillow_header(data)
    except Exception:  # noqa: BLE001 - a file Pillow refuses: the fast path must leave it to Pillow
        assert header is None
        with pytest.raises(ImageRefused):
            read_header(data, SPEC)
        return
    assert header in (None, pillow) and read_header(data, SPEC) == pillow


def test_files_pillow_treats_apart_are_left_to_it():
    """CMYK, MPO (two frames), an SOF other than C0-C2, Pillow's decompression bomb: all to Pillow."""
    others = other_jpegs()
    assert pillow_header(others["mpo"]).format == "MPO" and pillow_header(others["cmyk"]).mode == "CMYK"
    for name in ("cmyk", "mpo", "12-bit", "lossless frame", "bomb", "photoshop cut at a name", "short icc"):
        assert jpeg_header(others[name]) is None, name


def test_pillows_bomb_limit_is_where_the_fast_path_stops():
    plain = encoded(picture(np.random.default_rng(6), 64, 32))
    limit = 2 * Image.MAX_IMAGE_PIXELS
    under, over = resized_frame(plain, 65535, limit // 65535), resized_frame(plain, 65535, limit // 65535 + 1)
    with pytest.warns(Image.DecompressionBombWarning):
        assert jpeg_header(under) == pillow_header(under)
    assert jpeg_header(over) is None
    with pytest.raises(ImageRefused, match="DecompressionBombError"):
        read_header(over, SPEC)


@pytest.mark.parametrize("name", ["china.jpg", "flower.jpg", "harness 0", "harness progressive", "exif",
                                  "icc in 2 fragments", "photoshop"])
def test_truncated_and_corrupted_copies_never_raise_nor_disagree_with_pillow(name):
    """Truncations anywhere in the header (and a few past it), and 1-4 random bytes changed in it: what the
    fast path reads, Pillow reads too, and the same (the rest is left to Pillow)."""
    data = common_jpegs()[name]
    rng = np.random.default_rng(sum(name.encode()))
    scan = data.index(b"\xff\xda") + 20
    copies = [data[: int(cut)] for cut in rng.integers(0, scan, 150)] + [data[: int(cut)] for cut in
                                                                      rng.integers(scan, len(data), 20)]
    for _ in range(300):
        copy = bytearray(data)
        for at in rng.integers(0, scan, rng.integers(1, 5)):
            copy[int(at)] = int(rng.integers(0, 256))
        copies.append(bytes(copy))
    taken = [(copy, header) for copy in copies if (header := jpeg_header(copy)) is not None]
    for copy, header in taken:
        assert header == pillow_header(copy), copy[:scan]
    assert len(taken) >= 100, len(taken)  # the fast path still reads most copies whose frame was left whole


@pytest.mark.parametrize("data", [encoded(picture(np.random.default_rng(1), 40, 30), "PNG"), awkward_images()["gif"],
                                  b"plain text, no image at all", b"", b"\xff\xd8", b"\xff\xd8\xff",
                                  b"\xff\xd8\xff\xe0\x00", bytes(range(256))],
                         ids=["png", "gif", "text", "empty", "soi", "soi and ff", "cut in a length", "binary"])
def test_non_jpegs_are_left_to_pillow(data):
    assert jpeg_header(data) is None


def test_sort_files_answers_as_the_pillow_path_did():
    """A mixed list: the GPU takes whole RGB and L JPEGs with their headers, Pillow the PNG, the CMYK and the
    truncated JPEG; the garbage, the empty file and the one too large are refused with the Pillow path's words."""
    rng = np.random.default_rng(2)
    small = CropSpec.imagenet(224, max_decoded_bytes=1_000_000)
    files = [encoded(picture(rng, 333, 500)), encoded(picture(rng, 64, 48), "PNG"), awkward_images()["cmyk"],
             bad_images()["truncated"][0], b"plain text, no image at all", encoded(picture(rng, 800, 600)),
             encoded(picture(rng, 200, 100).convert("L"), progressive=True), b""]
    on_gpu, on_cpu, refused = sort_files(files, small)
    assert on_gpu == [(0, Header("JPEG", 333, 500, "RGB", True)), (6, Header("JPEG", 200, 100, "L", True))]
    assert on_gpu == [(index, pillow_header(files[index])) for index, _ in on_gpu]
    assert on_cpu == [1, 2, 3]
    assert {index: str(exc) for index, exc in refused.items()} == {
        4: "not an image Pillow can identify (27 bytes starting b'plain te')",
        5: "800x600 pixels decode to 1,440,000 bytes, above the limit max_decoded_bytes=1,000,000",
        7: "the file is empty (0 bytes)",
    }
    with pytest.raises(ImageRefused) as pillows:
        opened(files[5], small)
    assert str(pillows.value) == str(refused[5])
