"""``sendmmsg(2)`` through ctypes: many datagrams in one system call, standard library only.

Loaded on first use (:func:`load`), so importing the client does not import ctypes.
The ``mmsghdr`` and ``iovec`` arrays are built per call as flat arrays of machine
words (``array.array``), after checking against ctypes' own layout of the structs
that they are whole words; where that or ``sendmmsg`` itself is missing, :func:`load`
returns None and the caller sends one datagram per ``send()``.
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Callable, Sequence

#: ``sendmmsg(fd, datagrams, start)``: sends from ``datagrams[start]`` on, at most
#: :data:`MAX_BATCH`; returns how many went (at least 1) or raises OSError.
SendMmsg = Callable[[int, Sequence[bytes], int], int]

#: The kernel's limit per call (UIO_MAXIOV).
MAX_BATCH = 1024


@functools.cache
def load() -> SendMmsg | None:
    """The sendmmsg wrapper, or None where the platform lacks it."""
    try:
        import array
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.sendmmsg
    except (ImportError, OSError, AttributeError):
        return None

    class IOVec(ctypes.Structure):
        _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]

    class MsgHdr(ctypes.Structure):
        _fields_ = [
            ("msg_name", ctypes.c_void_p),
            ("msg_namelen", ctypes.c_uint32),
            ("msg_iov", ctypes.c_void_p),
            ("msg_iovlen", ctypes.c_size_t),
            ("msg_control", ctypes.c_void_p),
            ("msg_controllen", ctypes.c_size_t),
            ("msg_flags", ctypes.c_int),
        ]

    class MMsgHdr(ctypes.Structure):
        _fields_ = [("msg_hdr", MsgHdr), ("msg_len", ctypes.c_uint)]

    word = ctypes.sizeof(ctypes.c_size_t)
    typecode = next((code for code in "LQI" if array.array(code).itemsize == word), None)
    if typecode is None or ctypes.sizeof(MMsgHdr) % word or ctypes.sizeof(IOVec) != 2 * word:
        return None
    hdr_words = ctypes.sizeof(MMsgHdr) // word
    iov_at = MsgHdr.msg_iov.offset // word
    iovlen_at = MsgHdr.msg_iovlen.offset // word
    call.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]
    call.restype = ctypes.c_int
    get_errno = ctypes.get_errno
    c_char_p = ctypes.c_char_p
    c_void_p = ctypes.c_void_p
    cast = ctypes.cast
    accumulate = itertools.accumulate
    new_array = array.array
    iov_bytes = 2 * word

    def sendmmsg(fd: int, datagrams: Sequence[bytes], start: int) -> int:
        batch = datagrams[start : start + MAX_BATCH]
        count = len(batch)
        blob = b"".join(batch)  # one buffer: one address to look up
        pinned = c_char_p(blob)
        base = cast(pinned, c_void_p).value or 0
        lengths = list(map(len, batch))
        iov = [0] * (2 * count)
        iov[0::2] = accumulate(lengths[:-1], initial=base)
        iov[1::2] = lengths
        iov_array = new_array(typecode, iov)
        iov_base = iov_array.buffer_info()[0]
        hdrs = [0] * (hdr_words * count)
        hdrs[iov_at::hdr_words] = range(iov_base, iov_base + count * iov_bytes, iov_bytes)
        hdrs[iovlen_at::hdr_words] = [1] * count
        hdr_array = new_array(typecode, hdrs)
        sent: int = call(fd, hdr_array.buffer_info()[0], count, 0)
        if sent < 0:
            err = get_errno()
            raise OSError(err, os.strerror(err))
        del pinned, blob  # alive until here: the kernel read from them
        return sent

    return sendmmsg
