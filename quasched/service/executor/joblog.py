"""A job's log within a cap (docs/service.md, "What a job can take"): its first ``head`` bytes, then only
its last ``tail`` bytes, with a marker line where bytes were dropped.

On disk, ``<id>.log`` holds the head; past it the log goes to tail segments ``<id>.log.<offset>`` of
``tail / 2`` bytes each, named by where they start in the whole log; when a segment is full the next one
starts and all but the previous one are deleted, so at most ``head + tail`` bytes stay. The files say
everything a reader needs (no state besides them): :func:`read` composes the view (head, the marker
``--- quasched: N bytes dropped ---``, the tail) from any offset of the whole log, for the whole log,
its end and following it alike. Every file is the service's alone (mode 0600, never written through a
symbolic link). One writer at a time (the run wrapper; the executor between runs)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from quasched.service.domain import LOG_CAP, TEAM_LOG_CAP
from quasched.service.executor.runas import private_fd, write_private

#: default caps (:data:`quasched.service.domain.LOG_CAP`): half of a job's cap for its head, half for its tail
HEAD = TAIL = LOG_CAP // 2
TEAM_CAP = TEAM_LOG_CAP


@dataclass(frozen=True)
class Caps:
    """Bytes kept of a job's log: its first ``head`` and its last ``tail`` (at least 2)."""
    head: int = HEAD
    tail: int = TAIL

    @classmethod
    def of_total(cls, total: int) -> "Caps":
        """Half head, half tail."""
        return cls(total - total // 2, total // 2)

    @property
    def segment(self) -> int:
        return max(1, self.tail // 2)


def marker(dropped: int) -> bytes:
    """The line that stands for ``dropped`` bytes left out."""
    return f"\n--- quasched: {dropped} bytes dropped ---\n".encode()


def _segments(path: Path) -> list[tuple[int, Path]]:
    """(start offset, file) of the tail segments of the log headed by ``path``, in order."""
    prefix = path.name + "."
    out = []
    try:
        for entry in os.scandir(path.parent):
            if entry.name.startswith(prefix) and entry.name[len(prefix):].isdigit():
                out.append((int(entry.name[len(prefix):]), Path(entry.path)))
    except FileNotFoundError:
        return []
    return sorted(out)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def files(path: Path) -> list[Path]:
    """Every file of the log headed by ``path`` (those that exist)."""
    return ([path] if path.exists() else []) + [p for _, p in _segments(path)]


def end(path: Path) -> int:
    """Where the whole log ends (bytes written so far, the dropped ones included)."""
    segments = _segments(path)
    if segments:
        start, last = segments[-1]
        return start + _size(last)
    return _size(path)


def read(path: Path, offset: int = 0, limit: int | None = None) -> tuple[bytes, int]:
    """The view of the log headed by ``path`` from ``offset`` of the whole log: the head's bytes from there, a
    marker for the bytes no longer kept, then the tail's; at most ``limit`` bytes of the files. The bytes and
    the offset that follows them."""
    for _ in range(5):  # a segment deleted under the reader: read again, that part is now dropped
        try:
            return _read(path, offset, limit)
        except FileNotFoundError:
            continue
    return b"", offset


def _read(path: Path, offset: int, limit: int | None) -> tuple[bytes, int]:
    segments = _segments(path)
    pieces: list[tuple[int, int, Path]] = [(0, _size(path), path)] if path.exists() else []
    pieces += [(start, _size(p), p) for start, p in segments]
    out, pos, room = bytearray(), offset, limit
    for start, size, file in pieces:
        if start + size <= pos or room == 0:
            continue
        if pos < start:
            out += marker(start - pos)
            pos = start
        with open(file, "rb") as f:
            f.seek(pos - start)
            data = f.read(size - (pos - start) if room is None else min(room, size - (pos - start)))
        out += data
        pos += len(data)
        room = None if room is None else room - len(data)
    return bytes(out), pos


def tail(path: Path, max_bytes: int, lines: int | None = None) -> tuple[bytes, int]:
    """The view's end: its last ``max_bytes`` (of the whole log's offsets), then its last ``lines`` lines
    (None: all of those); and where the log ends."""
    start, segments = max(0, end(path) - max_bytes), _segments(path)
    if segments and _size(path) <= start < segments[0][0]:  # in the dropped part: from the tail kept
        start = segments[0][0]
    data, stop = read(path, start)
    if lines is not None:
        data = b"".join(data.splitlines(keepends=True)[-lines:]) if lines else b""
    return data, stop


class Writer:
    """Appends to the log headed by ``path`` within ``caps``, resuming where its files say it stands."""

    def __init__(self, path: Path, caps: Caps) -> None:
        self.path, self.caps = path, caps
        segments = _segments(path)
        head = _size(path)
        if segments:
            self._start, current = segments[-1]
            self._size = _size(current)
        elif head >= caps.head:
            self._start, self._size = head, 0  # the head is full: a first, empty segment
        else:
            self._start, self._size = -1, head  # still the head
        self._file = os.fdopen(private_fd(self._current(), os.O_WRONLY | os.O_APPEND), "ab")

    def _current(self) -> Path:
        return self.path if self._start < 0 else self.path.with_name(f"{self.path.name}.{self._start}")

    def write(self, data: bytes) -> None:
        """Append ``data``: the head's room first, then the tail segments (the older ones deleted)."""
        view = memoryview(data)
        while view:
            room = (self.caps.head if self._start < 0 else self.caps.segment) - self._size
            if room <= 0:
                self._next_segment()
                continue
            part = view[:room]
            self._file.write(part)
            self._size += len(part)
            view = view[len(part):]
        self._file.flush()

    def _next_segment(self) -> None:
        self._file.close()
        for _, old in _segments(self.path)[:-1]:  # keep the one just full (and the new one)
            old.unlink(missing_ok=True)
        self._start = max(self._start, 0) + self._size
        self._size = 0
        self._file = os.fdopen(private_fd(self._current(), os.O_WRONLY | os.O_TRUNC), "wb")

    def close(self) -> None:
        self._file.close()


def append(path: Path, caps: Caps, data: bytes) -> None:
    """Append ``data`` to the log (a writer opened and closed)."""
    writer = Writer(path, caps)
    try:
        writer.write(data)
    finally:
        writer.close()


def remove(path: Path, note: str) -> int:
    """Delete the log headed by ``path``, leaving ``note`` as its only line; the bytes freed."""
    freed = 0
    for file in files(path):
        freed += _size(file)
        file.unlink(missing_ok=True)
    write_private(path, (note + "\n").encode())
    return freed - _size(path)
