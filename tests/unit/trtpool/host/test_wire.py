"""The engine host's framing and slabs: what a peer may send, and what is refused."""
from __future__ import annotations

import os
import re
import socket
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from trtpool.host import wire
from trtpool.host.slab import GrowingSlab, Slab, input_major, room_for


@pytest.fixture
def pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    yield a, b
    a.close()
    b.close()


def test_a_message_and_its_descriptor_arrive_together(pair):
    a, b = pair
    slab = Slab.create(4096, "test")
    wire.send(a, {"op": "run", "id": 7}, (slab.fd,))
    message, fds = wire.receive(b)
    assert message == {"op": "run", "id": 7} and len(fds) == 1
    received = Slab(fds[0])
    slab.memory[:5] = b"hello"
    assert bytes(received.memory[:5]) == b"hello"   # one memory, two mappings
    received.close()
    slab.close()


@pytest.mark.parametrize("frame, fragment", [
    (struct.pack("<I", wire.MAX_MESSAGE_BYTES + 1), "the limit is"),
    (struct.pack("<I", 3) + b"\xff\xfe{", "is not JSON"),
    (struct.pack("<I", 2) + b"[]", "with an 'op'"),
    (struct.pack("<I", 9) + b'{"op": 1}', "with an 'op'"),
])
def test_a_bad_frame_is_refused_with_its_reason(pair, frame, fragment):
    a, b = pair
    a.sendall(frame)
    with pytest.raises(wire.MessageError, match=fragment):
        wire.receive(b)


def test_a_frame_cut_short_is_a_closed_connection_not_a_hang(pair):
    a, b = pair
    a.sendall(struct.pack("<I", 100) + b'{"op"')
    a.close()
    with pytest.raises(wire.ConnectionClosed, match="5 bytes into a 100-byte frame"):
        wire.receive(b)


def test_an_oversized_message_is_not_sent(pair):
    with pytest.raises(wire.MessageError, match="over the"):
        wire.send(pair[0], {"op": "run", "pad": "x" * wire.MAX_MESSAGE_BYTES})


def test_the_peer_is_this_user(pair):
    pid, uid = wire.peer_credentials(pair[0])
    assert (pid, uid) == (os.getpid(), os.getuid())


TENSORS = {
    "f32": np.arange(24, dtype=np.float32).reshape(2, 3, 4),
    "bf16": np.array([[1.5, -2.25]], dtype=ml_dtypes.bfloat16),
    "bool": np.array([True, False, True]),
    "empty": np.zeros((0, 5), np.int64),
    "text": np.array([[b"\xff\x00jpeg"], ["caf\u00e9"], [b""]], dtype=np.object_),
}


def test_tensors_come_back_as_written():
    slab = GrowingSlab("test", 64).room(room_for(TENSORS.values()))
    descriptors, end = slab.write(TENSORS)
    assert end <= slab.size and all(d[3] % 64 == 0 for d in descriptors)
    back = slab.read(descriptors)
    for name, array in TENSORS.items():
        expected = np.array([e.encode() if isinstance(e, str) else e for e in array.reshape(-1)],
                            dtype=np.object_).reshape(array.shape) if array.dtype == object else array
        assert back[name].dtype == expected.dtype and back[name].shape == expected.shape
        assert np.array_equal(back[name], expected), name
    assert np.shares_memory(back["f32"], np.frombuffer(slab.memory, np.uint8))   # read in place


def test_a_batch_is_written_input_by_input_each_inputs_rows_side_by_side():
    """Every request's first input, then every request's second: rows of a multiple of 64 bytes
    of one input lie side by side (one DMA for them in a host on a GPU); each request reads its own."""
    rng = np.random.default_rng(0)
    batch = [{"ids": rng.integers(0, 9, (1, 16)), "mask": np.ones((1, 16), np.int64)} for _ in range(3)]
    slab = GrowingSlab("test", 64).room(room_for(t for request in batch for t in request.values()))
    descriptors = input_major(slab.write_tensor, batch)
    ids = [next(d for d in request if d[0] == "ids") for request in descriptors]
    assert [d[3] for d in ids] == [0, 128, 256]  # 16 int64 = 128 bytes a row, adjacent
    assert min(d[3] for request in descriptors for d in request if d[0] == "mask") == 384
    for request, written in zip(batch, descriptors):
        back = slab.read(written)
        assert all(np.array_equal(back[name], request[name]) for name in request)


@pytest.mark.parametrize("descriptor, fragment", [
    (["x", "TYPE_FP32", [4], 4096, 16], "outside the 4,096-byte slab"),
    (["x", "TYPE_FP32", [4], -64, 16], "outside"),
    (["x", "TYPE_FP32", [5], 0, 16], "16 bytes for shape [5]"),
    (["x", "TYPE_COMPLEX", [4], 0, 16], "unknown data type"),
    (["x", "TYPE_FP32", [-1], 0, 0], "is not a list of at most"),
    (["x", "TYPE_STRING", [2], 0, 4], "end early"),
    ("x", "must be [name, type, shape, offset, nbytes]"),
])
def test_a_descriptor_that_lies_is_refused(descriptor, fragment):
    slab = Slab.create(4096, "test")
    with pytest.raises(wire.MessageError, match=re.escape(fragment)):
        slab.read([descriptor])


def test_a_growing_slab_hands_each_new_slab_over_once():
    growing = GrowingSlab("test", 128)
    first = growing.handover()
    assert len(first) == 1 and growing.handover() == ()
    assert growing.room(100).size == 128 and growing.handover() == ()
    bigger = growing.room(1000)
    assert bigger.size >= 1000 and growing.handover() == (bigger.fd,)


def test_slabs_leave_nothing_in_dev_shm():
    before = set(os.listdir("/dev/shm"))
    slabs = [Slab.create(1 << 20, "trtpool-test") for _ in range(3)]
    assert set(os.listdir("/dev/shm")) == before
    assert all(str(Path(f"/proc/self/fd/{s.fd}").readlink()).startswith("/memfd:trtpool-test") for s in slabs)
    for slab in slabs:
        slab.close()


def test_a_slab_not_sealed_against_shrinking_is_refused():
    """A peer that could truncate a mapped file would turn the reader's next access into a SIGBUS."""
    plain = os.memfd_create("unsealed", os.MFD_CLOEXEC)
    os.ftruncate(plain, 4096)
    with pytest.raises(wire.MessageError, match="not sealed against shrinking"):
        Slab.attach(plain)
    sealed = Slab.create(4096, "sealed")
    with pytest.raises(OSError):
        os.ftruncate(sealed.fd, 0)
    attached = Slab.attach(os.dup(sealed.fd))
    assert attached.size == 4096 and attached.fd == -1   # mapped, its descriptor given back


def test_bytes_elements_travel_as_triton_serialises_them():
    class Label:
        def __str__(self) -> str:
            return "cat"
    slab = Slab.create(4096, "test")
    values = np.array([b"\xffraw", "caf\u00e9", 5, 1.5, None, Label()], dtype=np.object_)
    descriptors, _ = slab.write({"out": values})
    assert list(slab.read(descriptors)["out"]) == [b"\xffraw", "caf\u00e9".encode(), b"5", b"1.5", b"None", b"cat"]
