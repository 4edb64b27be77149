"""trtpool.vision.images on the CPU: the header check, the refusals, the crop arithmetic against
Pillow's, and that the GPU path's draft-mode reduction picks the same scale as Pillow's own JPEG
draft (the GPU path itself runs in tests/gpu/test_gpu_pipeline.py; the kernel's table rows in
test_crop_kernel.py)."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from tests.harness.pipelines import awkward_images, bad_images, crop_reference, encoded, picture
from trtpool.vision.images import CropSpec, ImageRefused, cpu_crop, read_header

SPEC = CropSpec.imagenet(224)


@pytest.mark.parametrize("size", [(640, 480), (333, 500), (1024, 768), (120, 90), (2048, 1536), (4000, 3000),
                                  (600, 5000), (1000, 513), (2048, 2047)])
def test_draft_scale_is_pillows(size):
    data = encoded(Image.new("RGB", size))
    with Image.open(io.BytesIO(data)) as image:
        image.draft("RGB", (SPEC.resize, SPEC.resize))
        drafted = image.size
    scale = SPEC.draft_scale(*size)
    assert drafted == (-(-size[0] // scale), -(-size[1] // scale))


@pytest.mark.parametrize("name", sorted(bad_images()))
def test_bad_files_are_refused_with_the_reason(name):
    data, says = bad_images()[name]
    with pytest.raises(ImageRefused, match=says.removeprefix("element [0]: ").split(" (")[0]):
        cpu_crop(data, SPEC)


def test_a_file_past_max_decoded_bytes_is_refused_from_its_header():
    data = encoded(picture(np.random.default_rng(0), 1200, 1000))
    small = CropSpec.imagenet(224, max_decoded_bytes=3_000_000)
    with pytest.raises(ImageRefused, match=r"1200x1000 pixels decode to 3,600,000 bytes, above the limit "
                                           r"max_decoded_bytes=3,000,000"):
        read_header(data, small)
    assert cpu_crop(data, SPEC).shape == (3, 224, 224)


def test_a_truncated_jpeg_is_left_to_pillow_which_refuses_it():
    data, _ = bad_images()["truncated"]
    assert not read_header(data, SPEC).gpu_decodable
    assert read_header(data + b"\xff\xd9", SPEC).gpu_decodable


def test_awkward_files_are_cropped_and_their_headers_say_which_path_takes_them():
    gpu = {name: read_header(data, SPEC).gpu_decodable for name, data in awkward_images().items()}
    assert gpu == {"progressive": True, "grayscale": True, "cmyk": False, "exif_rotated": True, "gif": False,
                   "tiny": True}
    for data in awkward_images().values():
        crop = cpu_crop(data, SPEC)
        assert crop.shape == (3, 224, 224) and crop.dtype == np.float32 and np.isfinite(crop).all()


@pytest.mark.parametrize("size", [(640, 480), (333, 500), (256, 256), (120, 90), (1024, 768), (801, 601)])
def test_the_crop_kernels_arithmetic_follows_pillow(size):
    """The GPU paths' arithmetic (crop_reference: the kernel's formula in float64 numpy), fed
    Pillow's full decode, lands within a grey level of Pillow's own crop where no draft scale
    applies, and within the draft's difference (block means vs libjpeg's DCT scaling) where it does."""
    data = encoded(picture(np.random.default_rng(sum(size)), *size), quality=92)
    with Image.open(io.BytesIO(data)) as image:
        decoded = np.asarray(image.convert("RGB"))
    levels = np.abs(crop_reference(decoded, SPEC) - cpu_crop(data, SPEC)) * np.array(SPEC.std).reshape(3, 1, 1) * 255
    if SPEC.draft_scale(*size) == 1:
        assert levels.max() <= 1.01, levels.max()
    else:
        assert levels.mean() <= 3 and np.percentile(levels, 99) <= 10, (levels.mean(), np.percentile(levels, 99))
