"""Typed, validated parameters and a registry of named things that take them (placement policies,
federation dispatchers).

A spec is a name with optional parameters, ``name:a=1,b=2``; each parameter is parsed by its
:class:`Param` (type, choices, minimum, check) and the ones not given take their defaults. Imports no
NumPy: ``--help`` and ``quasched policies`` read registries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterator, Protocol, TypeVar

#: parsers for parameter kinds whose constructor does not parse text (``bool("false")`` is True)
_PARSERS: dict[type, Callable[[str], Any]] = {bool: lambda t: {"true": True, "false": False}[t.lower()]}


@dataclass(frozen=True)
class Param:
    """A typed parameter with a default, a check and a help text."""

    name: str
    kind: type
    default: Any
    help: str
    choices: tuple[Any, ...] = ()
    minimum: float | None = None
    #: raises :class:`ValueError` (with the reason) for a value that parses but cannot be used
    check: Callable[[Any], object] | None = None

    def parse(self, text: str) -> Any:
        """The value of ``text``; :class:`ValueError` naming the parameter when it is not valid."""
        try:
            value = _PARSERS.get(self.kind, self.kind)(text)
        except (KeyError, ValueError):
            raise ValueError(f"parameter {self.name}={text!r} is not a {self.kind.__name__}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"parameter {self.name}={text!r} must be a finite number")
        if self.choices and value not in self.choices:
            raise ValueError(f"parameter {self.name}={text!r}: choose from {', '.join(map(str, self.choices))}")
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"parameter {self.name}={text!r} must be at least {self.minimum:g}")
        if self.check is not None:
            try:
                self.check(value)
            except ValueError as err:
                raise ValueError(f"parameter {self.name}={text!r}: {err}") from None
        return value

    def describe(self) -> str:
        """``beta: float = 8.0 (at least 0): weight of the headroom term`` for listings."""
        limits = (f" (one of {', '.join(map(str, self.choices))})" if self.choices
                  else f" (at least {self.minimum:g})" if self.minimum is not None else "")
        return f"{self.name}: {self.kind.__name__} = {self.default!r}{limits}: {self.help}"


def defaults(params: tuple[Param, ...]) -> dict[str, Any]:
    """Every parameter at its default."""
    return {p.name: p.default for p in params}


def parse_params(owner: str, params: tuple[Param, ...], text: str) -> dict[str, Any]:
    """``"a=1,b=2"`` → every parameter of ``params``, given ones parsed and the rest at their defaults;
    :class:`ValueError` naming ``owner`` (e.g. ``policy fgd``), the parameter and the allowed names."""
    values = defaults(params)
    by_name = {p.name: p for p in params}
    for item in filter(None, (i.strip() for i in text.split(","))):
        key, eq, value = (part.strip() for part in item.partition("="))
        if not eq or key not in by_name:
            raise ValueError(f"{owner}: bad parameter {item!r} (parameters: {', '.join(by_name) or 'none'})")
        try:
            values[key] = by_name[key].parse(value)
        except ValueError as err:
            raise ValueError(f"{owner}: {err}") from None
    return values


class Entry(Protocol):
    """What a registry holds: a name, a one-line summary and typed parameters."""

    @property
    def name(self) -> str: ...

    @property
    def summary(self) -> str: ...

    @property
    def params(self) -> tuple[Param, ...]: ...


E = TypeVar("E", bound=Entry)


class Registry(Generic[E]):
    """Entries by name, in registration order; ``kind`` names them in errors (``unknown policy 'x'``)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, E] = {}

    def register(self, entry: E) -> E:
        """Add ``entry`` (a second one of the same name is an error)."""
        if entry.name in self._entries:
            raise ValueError(f"{self.kind} {entry.name!r} is already registered")
        self._entries[entry.name] = entry
        return entry

    def get(self, name: str) -> E:
        """The entry called ``name``; :class:`ValueError` listing the known names otherwise."""
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; choose from {', '.join(self._entries)}") from None

    def parse(self, spec: str) -> tuple[E, dict[str, Any]]:
        """``name[:a=1,b=2]`` → the entry and all its parameter values (defaults filled in)."""
        name, _, rest = spec.strip().partition(":")
        entry = self.get(name.strip())
        return entry, parse_params(f"{self.kind} {entry.name}", entry.params, rest)

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def entries(self) -> tuple[E, ...]:
        return tuple(self._entries.values())

    def describe(self) -> list[tuple[str, str, str]]:
        """``(name, summary, parameters)`` rows for a listing, one parameter per line."""
        return [(e.name, e.summary, "\n".join(p.describe() for p in e.params)) for e in self._entries.values()]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
