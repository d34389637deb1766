"""A file watermark: the ISO date on the first line of a file under one directory.

``watermark: {file: PATH}`` is read inside ``POST /api/v1/batches/run``, so what it
may read is held to this, on every read:

* the file lies under ``batches.watermark_dir`` (default ``<data_dir>/watermarks``): a
  relative path is taken from there, and a path that resolves outside it, through
  ``..`` or a symlink, is refused, when the config is saved (:func:`problem_of`, as far
  as the filesystem says then) and before every read. The read itself walks down from
  the directory one component at a time with ``O_NOFOLLOW``, so a symlink swapped in
  after the check is refused too;
* the read is bounded: the file is opened ``O_NONBLOCK`` and must be a regular file
  (``fstat``), so a FIFO, a device or a socket is refused at once, and at most
  :data:`MAX_FILE_BYTES` are read;
* no error says what the file holds: only that it is missing, not a regular file,
  outside the directory, or not an ISO date on its first line.
"""

from __future__ import annotations

import os
import stat
from datetime import date
from pathlib import Path

from jobserver.exceptions import WatermarkError

#: The most of a watermark file read: a date, a newline, perhaps a comment.
MAX_FILE_BYTES = 4096
_FILE_FLAGS = (os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY
               | getattr(os, "O_CLOEXEC", 0))
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
OUTSIDE = "resolves outside batches.watermark_dir (symlinks and '..' included)"


def inside(root: Path, file: str) -> tuple[str, ...] | None:
    """The components of ``file`` below the real ``root`` once every symlink that
    exists now is resolved; None when it resolves outside ``root`` or to ``root``."""
    real_root = os.path.realpath(root)
    target = os.path.realpath(os.path.join(real_root, file))
    relative = os.path.relpath(target, real_root)
    if relative == os.curdir or relative == os.pardir or \
            relative.startswith(os.pardir + os.sep) or os.path.isabs(relative):
        return None
    return tuple(relative.split(os.sep))


def problem_of(root: Path, file: str) -> str | None:
    """Why ``file`` may not be a watermark file, as far as can be told before it is
    read (it need not exist yet), or None."""
    if "\x00" in file:
        return "holds a NUL character"
    return OUTSIDE if inside(root, file) is None else None


def read_date(root: Path, file: str) -> date:
    """The ISO date on the first line of ``file`` under ``root``; :class:`WatermarkError`
    for anything else, naming the file as configured and never what it holds."""
    details = {"file": file}
    parts = inside(root, file) if "\x00" not in file else None
    if parts is None:
        raise WatermarkError(f"watermark file {file!r} {OUTSIDE}", details)
    try:
        raw = _read_beneath(os.path.realpath(root), parts, file)
    except FileNotFoundError:
        raise WatermarkError(f"watermark file {file!r} does not exist under "
                             "batches.watermark_dir", details) from None
    except OSError as exc:
        raise WatermarkError(f"watermark file {file!r} cannot be read: "
                             f"{os.strerror(exc.errno) if exc.errno else 'error'}",
                             details) from None
    lines = raw.decode("utf-8", errors="replace").strip().splitlines()
    try:
        return date.fromisoformat(lines[0].strip() if lines else "")
    except ValueError:
        raise WatermarkError(f"watermark file {file!r} does not hold an ISO date "
                             "(YYYY-MM-DD) on its first line", details) from None


def _read_beneath(real_root: str, parts: tuple[str, ...], file: str) -> bytes:
    """At most :data:`MAX_FILE_BYTES` of the regular file ``parts`` below
    ``real_root``, every component opened without following a symlink."""
    fd = os.open(real_root, _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            below = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = below
        handle = os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
    finally:
        os.close(fd)
    try:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            raise WatermarkError(f"watermark file {file!r} is not a regular file",
                                 {"file": file})
        return os.read(handle, MAX_FILE_BYTES)
    finally:
        os.close(handle)


__all__ = ["MAX_FILE_BYTES", "problem_of", "read_date"]
