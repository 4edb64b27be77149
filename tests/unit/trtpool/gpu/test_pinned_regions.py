"""Host memory page-locked in place (trtpool.gpu.pinned_regions), over the CUDA double: which
arrays lie in a registered region, and a refusal that leaves the memory pageable."""
from __future__ import annotations

import logging
import mmap

import numpy as np
import pytest

from tests.doubles.cuda_double import FakeCudart
from trtpool.gpu import cuda
from trtpool.gpu.pinned_regions import PinnedRegion, pinned, range_is_pinned


@pytest.fixture
def fake(monkeypatch) -> FakeCudart:
    double = FakeCudart()
    monkeypatch.setattr(cuda, "_cudart", double)
    return double


def is_pinned(array: np.ndarray) -> bool:
    """Whether all of a C-contiguous array's bytes lie in one registered region."""
    return range_is_pinned(int(array.ctypes.data), array.nbytes)


def test_arrays_inside_a_registered_mapping_are_pinned_until_it_is_closed(fake):
    memory = mmap.mmap(-1, 8192)
    region = PinnedRegion(memory)
    whole = np.frombuffer(memory, np.uint8)
    assert fake.registered == {region.start: 8192}
    assert is_pinned(whole) and is_pinned(whole[4096:]) and is_pinned(whole[100:200])
    assert not is_pinned(np.zeros(16, np.uint8)), "memory elsewhere"
    region.close()
    region.close()  # a second close does nothing
    assert not is_pinned(whole) and fake.registered == {}


def test_memory_cuda_refuses_to_lock_stays_pageable_and_says_why(fake, caplog):
    memory = mmap.mmap(-1, 4096)
    first = PinnedRegion(memory)
    with caplog.at_level(logging.WARNING, logger="trtpool"):
        assert pinned(memory, "the input slab of instance pid 7") is None  # already registered: refused
    assert "the input slab of instance pid 7 stays pageable" in caplog.text
    assert "cudaErrorHostMemoryAlreadyRegistered" in caplog.text
    first.close()
    assert pinned(None, "nothing") is None
    with caplog.at_level(logging.INFO, logger="trtpool"):
        again = pinned(memory, "the input slab of instance pid 8")
    assert again is not None and "the input slab of instance pid 8 is page-locked in place (4,096 bytes)" in caplog.text
    again.close()
