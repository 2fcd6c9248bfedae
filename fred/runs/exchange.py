"""Swapping two paths in one step where the system can: Linux's ``renameat2(RENAME_EXCHANGE)``.

Replacing a directory by renames leaves a moment when nothing is at its name (the old one
moved aside, the new one not yet in): a reader then finds nothing, and a process killed
then leaves nothing. An exchange has no such moment: the name holds the old, then the new.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path

AT_FDCWD = -100
RENAME_EXCHANGE = 2
# glibc has had a renameat2 wrapper only since 2.28; the system call itself since Linux 3.15.
SYS_RENAMEAT2 = {"x86_64": 316, "aarch64": 276}
# The errors that say the exchange cannot be made here, not that the paths are wrong: an old
# kernel (ENOSYS), a filesystem without it (EINVAL: NFS, many FUSE filesystems), a
# sandbox's filter on the call (EPERM or ENOSYS). A caller falls back to renames, which report
# a real problem (a permission, say) themselves.
UNSUPPORTED = frozenset({errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EPERM})


def exchange(a: str | Path, b: str | Path) -> None:
    """Swap what is at ``a`` with what is at ``b`` atomically; both must exist (ENOENT otherwise).

    Raises OSError with an errno in ``UNSUPPORTED`` where this system or filesystem cannot.
    """
    call = _renameat2()
    if call is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available on this system", os.fspath(a))
    if call(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), os.fspath(a), None, os.fspath(b))


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        wrapper = libc.renameat2
    except AttributeError:  # glibc < 2.28, or a libc without the wrapper
        return _syscall(libc)
    wrapper.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    wrapper.restype = ctypes.c_int
    return wrapper


def _syscall(libc: ctypes.CDLL) -> Callable[..., int] | None:
    number = SYS_RENAMEAT2.get(platform.machine())
    if number is None:
        return None
    syscall = libc.syscall
    syscall.restype = ctypes.c_long  # variadic: every argument is passed as a whole register

    def call(olddir: int, old: bytes, newdir: int, new: bytes, flags: int) -> int:
        return syscall(
            ctypes.c_long(number),
            ctypes.c_long(olddir),
            ctypes.c_char_p(old),
            ctypes.c_long(newdir),
            ctypes.c_char_p(new),
            ctypes.c_ulong(flags),
        )

    return call
