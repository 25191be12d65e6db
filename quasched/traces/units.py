"""Amounts written by people: CPU cores or milli-cores, memory and disk with binary units.

Each parser takes one value (text, or a number already parsed from YAML/JSON)
and returns an integer in the workload's units, or raises ``ValueError`` whose
text says what is wrong and how to write it instead. Amounts are rounded to
the nearest unit (milli-core, MiB).
"""

from __future__ import annotations

import math
import re

#: memory/disk units and their size in MiB (binary: 1Gi = 1024Mi)
MEMORY_UNITS = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024**2}
MEMORY_UNITS |= {f"{unit}B": size for unit, size in list(MEMORY_UNITS.items())}
_AMOUNT = re.compile(r"\s*([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*")
_MAX = 2.0**53  # larger numbers are not exact integers in float64

Value = str | int | float


CPU_HINT = "write cores (4, 0.5) or milli-cores (500m)"
MEMORY_HINT = f"write a plain number of MiB or a number with a unit {', '.join(MEMORY_UNITS)} (binary: 1Gi = 1024Mi)"


def _split(value: Value, units: tuple[str, ...], hint: str) -> tuple[float, str]:
    """(number, unit) of ``value``, a number optionally followed by one of ``units``.

    ValueError (ending with ``hint``, the fix) for anything else or a negative number.
    """
    match = _AMOUNT.fullmatch(value) if isinstance(value, str) else None
    if isinstance(value, bool) or not (match or isinstance(value, (int, float))):
        raise ValueError(f"{value!r} is not a number; {hint}")
    number, unit = (float(match.group(1)), match.group(2)) if match else (float(value), "")
    if unit and unit not in units:
        raise ValueError(f"{value!r} has unknown unit {unit!r}; {hint}")
    if not math.isfinite(number):
        raise ValueError(f"{value!r} is not a number; {hint}")
    if number < 0:
        raise ValueError(f"{value!r} must not be negative")
    if number > _MAX:
        raise ValueError(f"{value!r} is out of range")
    return number, unit


def _whole(value: Value, amount: float) -> int:
    """``amount`` (``value`` in the workload's unit) rounded; ValueError beyond exact integers (1e15Ti wrapped to
    a negative int64)."""
    if amount > _MAX:
        raise ValueError(f"{value!r} is out of range")
    return round(amount)


def parse_cpu(value: Value) -> int:
    """CPU in milli-cores: cores (``4``, ``0.5``) or milli-cores (``500m``)."""
    number, unit = _split(value, ("m",), CPU_HINT)
    return _whole(value, number if unit == "m" else number * 1000)


def parse_memory(value: Value) -> int:
    """Memory or disk in MiB: a plain number is MiB; units Ki, Mi, Gi, Ti (or KiB .. TiB)."""
    number, unit = _split(value, tuple(MEMORY_UNITS), MEMORY_HINT)
    return _whole(value, number * MEMORY_UNITS.get(unit, 1))


GPU_HINT = "write 0 (no GPU), a share of one GPU between 0 and 1 (0.25), or a whole number of GPUs (1, 2, 8)"


def parse_gpu(value: Value) -> float:
    """GPUs requested: 0, a share of one GPU in (0, 1) to the nearest 1/1000, or k >= 1 whole GPUs."""
    number, _ = _split(value, (), GPU_HINT)
    if number > 1 and number != round(number):
        raise ValueError(f"{value!r} is neither a share of one GPU nor whole GPUs; {GPU_HINT}")
    if 0 < number < 1 and round(number * 1000) == 0:
        raise ValueError(f"{value!r} is below 0.001 GPU, the smallest share; write 0 for no GPU")
    if 0 < number < 1 and round(number * 1000) == 1000:
        raise ValueError(f"{value!r} rounds to a whole GPU; write 1")
    return number
