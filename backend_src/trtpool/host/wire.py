"""Messages between a thin instance and its engine host over one Unix stream socket.

A message is a 4-byte little-endian length and that many bytes of JSON (an object
with an "op"). File descriptors (the memfd slabs that carry tensors) ride along as
SCM_RIGHTS ancillary data on the length's bytes. Tensors never travel in a message:
it holds only where they lie in a slab (trtpool.host.slab).

JSON because control messages are small and must be parsed safely from a peer that
may send anything; pickle would run code. A frame that is too long, not JSON, not an
object or cut short raises MessageError: the reader drops that connection alone,
since a stream cannot be resynchronised after a bad frame.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from typing import Any

from trtpool.errors import TrtpoolError

MAX_MESSAGE_BYTES = 4 << 20  # control messages only: far above a batch of 1,000 requests' descriptors
MAX_FDS = 4  # a message carries at most a slab or two
_LENGTH = struct.Struct("<I")

Message = dict[str, Any]


class MessageError(TrtpoolError):
    """A peer sent a frame that is not a message of this protocol."""


class ConnectionClosed(TrtpoolError):
    """The peer closed the connection (or died)."""


def send(sock: socket.socket, message: Message, fds: tuple[int, ...] = ()) -> None:
    body = json.dumps(message, separators=(",", ":")).encode()
    if len(body) > MAX_MESSAGE_BYTES:
        raise MessageError(
            f"a '{message.get('op')}' message of {len(body):,} bytes is over the {MAX_MESSAGE_BYTES:,}-byte limit"
        )
    frame = _LENGTH.pack(len(body)) + body
    try:
        sent = socket.send_fds(sock, [frame], list(fds)) if fds else sock.send(frame)
        if sent < len(frame):
            sock.sendall(frame[sent:])
    except (BrokenPipeError, ConnectionResetError) as exc:
        raise ConnectionClosed(f"the peer closed the connection ({exc.strerror})") from None


def receive(sock: socket.socket) -> tuple[Message, list[int]]:
    """The next message and the file descriptors that came with it (the caller owns them)."""
    head, fds = _receive_head(sock)
    try:
        (length,) = _LENGTH.unpack(head)
        if length > MAX_MESSAGE_BYTES:
            raise MessageError(f"a message of {length:,} bytes is announced; the limit is {MAX_MESSAGE_BYTES:,}")
        body = _receive_exactly(sock, length)
        try:
            message = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise MessageError(f"a message of {length:,} bytes is not JSON ({exc})") from None
        if not isinstance(message, dict) or not isinstance(message.get("op"), str):
            raise MessageError("a message is not a JSON object with an 'op'")
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return message, fds


def _receive_head(sock: socket.socket) -> tuple[bytes, list[int]]:
    try:
        data, fds, flags, _ = socket.recv_fds(sock, _LENGTH.size, MAX_FDS)
    except ConnectionResetError:
        raise ConnectionClosed("the peer reset the connection") from None
    if flags & socket.MSG_CTRUNC:
        for fd in fds:
            os.close(fd)
        raise MessageError(f"a message came with more than {MAX_FDS} file descriptors")
    if not data:
        for fd in fds:
            os.close(fd)
        raise ConnectionClosed("the peer closed the connection")
    if len(data) < _LENGTH.size:
        try:
            data += _receive_exactly(sock, _LENGTH.size - len(data))
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
    return data, fds


def _receive_exactly(sock: socket.socket, count: int) -> bytes:
    buffer = bytearray(count)
    view = memoryview(buffer)
    got = 0
    while got < count:
        try:
            n = sock.recv_into(view[got:])
        except ConnectionResetError:
            n = 0
        if n == 0:
            raise ConnectionClosed(f"the peer closed the connection {got} bytes into a {count}-byte frame")
        got += n
    return bytes(buffer)


def peer_credentials(sock: socket.socket) -> tuple[int, int]:
    """The pid and user id of the process at the other end (SO_PEERCRED)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return pid, uid
