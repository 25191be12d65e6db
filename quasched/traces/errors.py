"""Errors raised while locating or reading trace files."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence


class TraceError(ValueError):
    """A trace file that cannot be used, with the place of the first problem.

    ``row`` is the line number in the file (the header is line 1), ``None``
    when the problem is not tied to a line; ``field`` is the column name.
    """

    def __init__(
        self, file: str | Path, message: str, row: int | None = None, field: str | None = None
    ) -> None:
        self.file = str(file)
        self.row = row
        self.field = field
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = Path(self.file).name
        if self.row is not None:
            where += f" line {self.row}"
        if self.field is not None:
            where += f", field {self.field!r}"
        return f"{where}: {self.message}"


class TraceNotFound(TraceError):
    """An input file (trace, cluster, workload, carbon) found in none of the searched locations (and not downloaded)."""

    def __init__(self, file: str | Path, searched: Sequence[str], fix: str) -> None:
        self.searched = tuple(searched)
        looked = "".join(f"\n  - {location}" for location in searched)
        super().__init__(file, f"not found. Looked in:{looked}\n{fix}")

    def __str__(self) -> str:
        return f"file {self.file!r} {self.message}"


def require_file(path: Path) -> None:
    """:class:`TraceNotFound` unless ``path`` is a file (a folder is named as one)."""
    if not path.is_file():
        fix = "it is a folder: pass the file inside it" if path.is_dir() else "check the path"
        raise TraceNotFound(path, [str(path)], f"Fix: {fix}.")
