"""Validated CSV reading shared by the trace loaders.

A file is read as text (pandas, every cell a string) and columns are converted
with vectorised checks. Accessors do not raise: each records its problems, and
:meth:`Table.check` raises a :class:`TraceError` for the one that comes first
in the file (by line, then by column), so users get the exact line and field.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from quasched.model.nodes import MODEL_NAME
from quasched.traces.errors import TraceError, require_file

_MAX_EXACT = 2.0**53  # larger numbers are not exact integers in float64
_FIELD_COUNT = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")
_OPEN_QUOTE = re.compile(r"EOF inside string starting at row (\d+)")

Message = str | Callable[[int], str]


def read_table(
    path: str | Path, required: Sequence[str], optional: Sequence[str] = (), *, strict: bool = False
) -> "Table":
    """Read ``path`` as text and check its header holds every ``required`` column.

    Other columns are ignored, or rejected if ``strict``.
    """
    path = Path(path)
    require_file(path)
    try:
        frame = pd.read_csv(
            path, header=None, dtype=str, na_filter=False, skip_blank_lines=False, encoding="utf-8"
        )
    except pd.errors.EmptyDataError:
        raise TraceError(path, "the file is empty") from None
    except pd.errors.ParserError as exc:
        raise _parser_error(path, str(exc)) from None
    except (UnicodeDecodeError, OSError) as exc:
        raise TraceError(path, f"cannot read the file: {exc}") from None
    header = [str(cell).strip() for cell in frame.iloc[0]]
    if short := _short_row(path, len(header)):
        line, seen = short
        raise TraceError(path, f"malformed CSV: {seen} fields, the header has {len(header)} (a cut line?)",
                         line, header[seen])
    for i, column in enumerate(header):
        if column in header[:i]:
            raise TraceError(path, "duplicate column", 1, column)
    for column in required:
        if column not in header:
            raise TraceError(path, f"required column is missing (header: {','.join(header)})", 1, column)
    for column in header if strict else ():
        if column not in required and column not in optional:
            known = ", ".join([*required, *optional])
            raise TraceError(path, f"unknown column; rename or remove it (known columns: {known})", 1, column)
    wanted = [c for c in header if c in required or c in optional]
    body = frame.iloc[1:, [header.index(c) for c in wanted]].set_axis(wanted, axis=1)
    body = body.apply(lambda column: column.str.strip())
    body = body[(frame.iloc[1:] != "").any(axis=1)]  # blank lines
    if body.empty:
        raise TraceError(path, "the file has a header but no data rows")
    return Table(path, body, header)


def _short_row(path: Path, width: int) -> tuple[int, int] | None:
    """``(line, fields)`` of the first data row with fewer than ``width`` fields (pandas pads them silently)."""
    with path.open(newline="", encoding="utf-8-sig") as file:
        reader = csv.reader(file)
        next(reader, None)
        for row in reader:
            if row and len(row) < width:
                return reader.line_num, len(row)
    return None


def _parser_error(path: Path, text: str) -> TraceError:
    """A pandas tokenizer error as a :class:`TraceError` with its line."""
    if match := _FIELD_COUNT.search(text):
        expected, line, seen = match.groups()
        return TraceError(path, f"malformed CSV: {seen} fields, the header has {expected}", int(line))
    if match := _OPEN_QUOTE.search(text):
        return TraceError(path, "malformed CSV: a quoted field is never closed", int(match.group(1)) + 1)
    return TraceError(path, f"malformed CSV: {text.strip()}")


class Table:
    """Text cells of a CSV file plus the problems found converting them."""

    def __init__(self, path: Path, body: pd.DataFrame, header: list[str]) -> None:
        self.path = path
        self._cells = {c: body[c].to_numpy(dtype=object) for c in body.columns}
        self._lines = body.index.to_numpy() + 1
        self._header = header
        self._problems: list[tuple[int, int, int, str, str]] = []

    @classmethod
    def from_records(cls, path: Path, records: Sequence[tuple[int, dict[str, str]]], header: list[str]) -> "Table":
        """A table of text cells given as ``(file line, {column: text})``; absent cells are ""."""
        lines = [line for line, _ in records]
        body = pd.DataFrame([[row.get(c, "") for c in header] for _, row in records],
                            columns=header, index=np.asarray(lines, dtype=np.int64) - 1, dtype=object)
        return cls(path, body, header)

    def has(self, column: str) -> bool:
        return column in self._cells

    def flag(self, column: str, bad: np.ndarray, message: Message) -> None:
        """Record the first row where ``bad`` holds.

        ``message`` is a template where ``{value}`` stands for the quoted cell,
        or a function of the row position.
        """
        rows = np.flatnonzero(bad)
        if len(rows):
            i = int(rows[0])
            text = message(i) if callable(message) else message.format(value=repr(self._cells[column][i]))
            order = (int(self._lines[i]), self._header.index(column), len(self._problems))
            self._problems.append((*order, column, text))

    def check(self) -> None:
        """Raise the problem that comes first in the file, if any."""
        if self._problems:
            line, _, _, column, text = min(self._problems)
            raise TraceError(self.path, text, line, column)

    @property
    def lines(self) -> np.ndarray:
        """File line number of every data row."""
        return self._lines

    def line(self, row: int) -> int:
        """File line number of data row ``row``."""
        return int(self._lines[row])

    # ------------------------------------------------------------ converters
    def number(
        self,
        column: str,
        *,
        integer: bool = True,
        minimum: float | None = 0,
        maximum: float | None = None,
        empty: float | None = None,
    ) -> np.ndarray:
        """A numeric column (int64 if ``integer`` else float64).

        ``empty`` is the value of an empty cell (``None``: a value is required);
        bad cells are flagged and read as 0.
        """
        raw = self._cells[column]
        values = np.array(pd.to_numeric(pd.Series(raw), errors="coerce"), dtype=float)
        blank = raw == ""
        ok = np.isfinite(values)
        if empty is None:
            self.flag(column, blank, "value is missing")
        self.flag(column, ~blank & ~ok, "{value} is not a number")
        if minimum is not None:
            self.flag(column, ok & (values < minimum),
                      "{value} must not be negative" if minimum == 0 else f"{{value}} is below {minimum:g}")
        if maximum is not None:
            self.flag(column, ok & (values > maximum), f"{{value}} is above {maximum:g}")
        self.flag(column, ok & (np.abs(values) > _MAX_EXACT), "{value} is out of range")
        ok &= np.abs(values) <= _MAX_EXACT
        if integer:
            self.flag(column, ok & (values != np.round(values)), "{value} is not an integer")
        values[~ok] = 0
        if empty is not None:
            values[blank] = empty
        return values.astype(np.int64) if integer else values

    def convert(self, column: str, parse: Callable[[str], float], *, empty: float | None = None) -> np.ndarray:
        """A column converted by ``parse`` one distinct cell at a time (float64).

        ``parse`` raises ``ValueError`` with the problem's text; ``empty`` is
        the value of an empty cell (``None``: a value is required). Bad cells read as 0.
        """
        raw = self._cells[column]
        inverse, unique = pd.factorize(raw)
        values = np.zeros(len(unique))
        problems: dict[int, str] = {}
        for j, cell in enumerate(unique):
            try:
                values[j] = (0 if empty is None else empty) if cell == "" else parse(cell)
            except ValueError as exc:
                problems[j] = str(exc)
        if empty is None:
            self.flag(column, raw == "", "value is missing")
        self.flag(column, np.isin(inverse, list(problems)), lambda i: problems[int(inverse[i])])
        return values[inverse]

    def not_before(self, column: str, end: np.ndarray, start_column: str, start: np.ndarray) -> None:
        """Flag the rows where ``end`` (of ``column``) is before ``start`` (NaN: unknown, never flagged)."""
        self.flag(column, end < start, lambda i: f"{end[i]:g} is before {start_column} {start[i]:g}; "
                                                 "a pod cannot end before it starts")

    def text(self, column: str) -> np.ndarray:
        """Strings as written ("" = empty)."""
        return self._cells[column]

    def required_text(self, column: str) -> np.ndarray:
        """Non-empty strings."""
        raw = self._cells[column]
        self.flag(column, raw == "", "value is missing")
        return raw

    def names(self, column: str) -> np.ndarray:
        """Non-empty, unique identifiers."""
        raw = self.required_text(column)
        duplicate = pd.Series(raw).duplicated().to_numpy() & (raw != "")
        self.flag(column, duplicate,
                  lambda i: f"{raw[i]!r} already used on line {self.line(np.flatnonzero(raw == raw[i])[0])}")
        return raw

    def choice(self, column: str, allowed: Sequence[str]) -> np.ndarray:
        """A column whose values must be among ``allowed``."""
        raw = self._cells[column]
        shown = ", ".join(repr(a) for a in allowed)
        self.flag(column, ~pd.Series(raw).isin(allowed).to_numpy(), f"{{value}} is not one of {shown}")
        return raw

    def gpu_models(self, column: str, *, single: bool = False) -> np.ndarray:
        """GPU-model names: ``|``-separated lists, empty tokens dropped (or one name if ``single``).

        Every token must look like a model name (``MODEL_NAME``); "" = no model.
        """
        raw = self._cells[column]
        inverse, unique = pd.factorize(raw)
        normal = np.empty(len(unique), dtype=object)
        valid = np.empty(len(unique), dtype=bool)
        for j, value in enumerate(unique):
            tokens = [value] if single and value else [t for t in value.split("|") if t]
            normal[j] = "|".join(tokens)
            valid[j] = all(MODEL_NAME.fullmatch(t) for t in tokens)
        what = "a GPU model name" if single else "a list of GPU model names separated by '|'"
        self.flag(column, ~valid[inverse], f"{{value}} is not {what}")
        return normal[inverse]
