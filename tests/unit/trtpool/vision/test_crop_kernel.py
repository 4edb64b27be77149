"""trtpool.vision.crop_kernel on the CPU: the table rows that tell the kernel where each decoded image
lies (the kernel itself runs in tests/gpu/test_gpu_pipeline.py)."""
from __future__ import annotations

from trtpool.vision.crop_kernel import FIELDS, interface_memory, table_row
from trtpool.vision.images import CropSpec

SPEC = CropSpec.imagenet(224)


def test_the_kernel_table_reads_the_layout_the_decoder_names():
    """A decoded image 3 pixels wide is [3, H, 3] planar or [H, 3, 3] interleaved: the decoder's
    word decides, not the shape (strides in bytes, as the CUDA array interface gives them, None
    where the image is C-contiguous)."""
    planar = interface_memory({"shape": (3, 300, 3), "data": (1000, False), "strides": None})
    interleaved = interface_memory({"shape": (300, 3, 3), "data": (2000, False), "strides": (9, 3, 1)})
    assert planar == (1000, (3, 300, 3), (900, 3, 1))
    # pointer, height, width, row stride, pixel stride, channel stride ... output row
    row = table_row(SPEC, planar, 4, planar=True)
    assert (row[:6], row[-1], len(row)) == ([1000, 300, 3, 3, 1, 900], 4, FIELDS)
    row = table_row(SPEC, interleaved, 5, planar=False)
    assert (row[:6], row[-1]) == ([2000, 300, 3, 9, 3, 1], 5)
