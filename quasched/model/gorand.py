"""Go-runtime compatibility for bit-exact reproduction of the FGD simulator.

Everything the published FGD results (Weng et al., ATC'23, Go simulator
``hkust-adsl/kubernetes-scheduler-simulator``) need from the Go runtime lives
here and nowhere else:

- :class:`GoRand`: a port of Go's ``math/rand`` global source (additive lagged
  Fibonacci generator, Go 1.15-1.20) with the derived draws ``Int63``,
  ``Int31n``, ``Intn``, ``Shuffle`` (Lemire) and ``Perm``, draw for draw.
- The extra draws the Go binary spends outside the algorithm: one ``Int63``
  after seeding, ten after workload tuning (Kubernetes informers) and one
  ``Intn(100)`` per scheduling cycle. Preemption spends none: the GPU filter
  marks nodes unresolvable, so the default PostFilter finds no candidate
  nodes to draw from (this reproduces the validated reference's Random runs).

The generator is seeded from Go's ``rngCooked`` table (607 constants from
``src/math/rand/rng.go``, Copyright The Go Authors, BSD-3-Clause), shipped as
``quasched/model/data/go_rng_cooked.txt`` beside its licence.
"""

from __future__ import annotations

import os
from functools import lru_cache
from importlib import resources
from pathlib import Path

_LEN = 607
_TAP = 273
_MASK64 = (1 << 64) - 1
_MASK63 = (1 << 63) - 1
_INT32_MAX = (1 << 31) - 1
_SEED_FALLBACK = 89482311

#: draws Go spends between workload tuning and the node permutation.
INFORMER_DRAWS = 10
#: draws Go spends right after seeding (argument of a suppressed log call).
SEED_LOG_DRAWS = 1

COOKED_FILE = "go_rng_cooked.txt"
ENV_VAR = "QUASCHED_COMPAT_DATA"


class CompatDataMissing(FileNotFoundError):
    """The Go ``rngCooked`` table is not where it was pointed at, or is malformed."""


def override_dirs(*dirs: Path | None) -> list[Path]:
    """Directories explicitly given for the table: the arguments, else ``$QUASCHED_COMPAT_DATA``."""
    given = [Path(d) for d in dirs if d is not None]
    if not given and os.environ.get(ENV_VAR):
        given.append(Path(os.environ[ENV_VAR]))
    return given


@lru_cache(maxsize=4)
def load_cooked(*dirs: Path | None) -> tuple[int, ...]:
    """The 607 ``rngCooked`` constants as unsigned 64-bit integers.

    Read from the first given directory holding ``go_rng_cooked.txt`` (or
    ``$QUASCHED_COMPAT_DATA`` when none is given); without either, from the
    table packaged with quasched. An override without the file is an error.
    """
    overrides = override_dirs(*dirs)
    if overrides:
        path = next((d / COOKED_FILE for d in overrides if (d / COOKED_FILE).is_file()), None)
        if path is None:
            looked = "\n  ".join(str(d / COOKED_FILE) for d in overrides)
            raise CompatDataMissing(
                f"Go compatibility mode: {COOKED_FILE} (Go's rngCooked table) not found in:\n  {looked}\n"
                f"Fix --compat-data (or {ENV_VAR}), drop it to use the packaged table, or use --rng native."
            )
        where, text = str(path), path.read_text()
    else:
        packaged = resources.files("quasched.model") / "data" / COOKED_FILE
        where, text = str(packaged), packaged.read_text()
    values = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            values += [int(word) for word in line.split()]
        except ValueError:
            raise CompatDataMissing(f"{where} line {number}: {line.strip()[:40]!r} is not an integer; the table "
                                    f"holds {_LEN} integers (Go's rngCooked)") from None
    if len(values) != _LEN:
        raise CompatDataMissing(f"{where}: expected {_LEN} constants, found {len(values)}")
    return tuple(v & _MASK64 for v in values)


def _park_miller(x: int) -> int:
    hi, lo = divmod(x, 44488)
    x = 48271 * lo - 3399 * hi
    return x + _INT32_MAX if x < 0 else x


class GoRand:
    """Go's ``math/rand`` global source, seeded like ``rand.Seed(seed)``.

    Also a :class:`~quasched.model.random.RandomStream` whose hooks spend the
    draws the Go simulator spends outside the scheduling algorithm.
    """

    def __init__(self, seed: int, cooked: tuple[int, ...] | None = None) -> None:
        cooked = cooked if cooked is not None else load_cooked()
        self.tap = 0
        self.feed = _LEN - _TAP
        seed %= _INT32_MAX
        if seed == 0:
            seed = _SEED_FALLBACK
        x = seed
        vec = [0] * _LEN
        for i in range(-20, _LEN):
            x = _park_miller(x)
            if i >= 0:
                u = (x << 40) & _MASK64
                x = _park_miller(x)
                u ^= (x << 20) & _MASK64
                x = _park_miller(x)
                u ^= x
                vec[i] = u ^ cooked[i]
        self.vec = vec

    # ---------------------------------------------------------- raw draws
    def uint64(self) -> int:
        """Go's ``rngSource.Uint64``: the next value of the additive lagged Fibonacci generator."""
        self.tap = self.tap - 1 if self.tap else _LEN - 1
        self.feed = self.feed - 1 if self.feed else _LEN - 1
        value = (self.vec[self.feed] + self.vec[self.tap]) & _MASK64
        self.vec[self.feed] = value
        return value

    def int63(self) -> int:
        """Go's ``Rand.Int63``: a non-negative 63-bit integer."""
        return self.uint64() & _MASK63

    def int31(self) -> int:
        """Go's ``Rand.Int31``: the top 31 bits of :meth:`int63`."""
        return self.int63() >> 32

    def uint32(self) -> int:
        """Go's ``Rand.Uint32``: 32 bits of :meth:`int63` (as Go takes them)."""
        return (self.int63() >> 31) & 0xFFFFFFFF

    def int31n(self, n: int) -> int:
        """Go's ``Rand.Int31n``: uniform in ``[0, n)`` by rejection (a mask for powers of two)."""
        if n & (n - 1) == 0:
            return self.int31() & (n - 1)
        limit = _INT32_MAX - (1 << 31) % n
        v = self.int31()
        while v > limit:
            v = self.int31()
        return v % n

    def _lemire(self, bound: int) -> int:
        prod = self.uint32() * bound
        low = prod & 0xFFFFFFFF
        if low < bound:
            thresh = ((1 << 32) - bound) % bound
            while low < thresh:
                prod = self.uint32() * bound
                low = prod & 0xFFFFFFFF
        return prod >> 32

    # ------------------------------------------------------ RandomStream
    def intn(self, n: int) -> int:
        if not 0 < n <= _INT32_MAX:
            raise ValueError(f"intn bound {n} out of range")
        return self.int31n(n)

    def shuffle(self, items: list) -> None:
        for i in range(len(items) - 1, 0, -1):
            j = self._lemire(i + 1)
            items[i], items[j] = items[j], items[i]

    def perm(self, n: int) -> list[int]:
        a = [0] * n
        for i in range(n):
            j = self.intn(i + 1)
            a[i] = a[j]
            a[j] = i
        return a

    def pick(self, items: list) -> object:
        """Reservoir sampling, one ``Intn`` draw per item (the Go simulator's device choice)."""
        choice = None
        for seen, item in enumerate(items, start=1):
            if self.intn(seen) == 0:
                choice = item
        return choice

    def burn(self, draws: int) -> None:
        """Spend ``draws`` :meth:`int63` draws (those Go's simulator makes outside the scheduler)."""
        for _ in range(draws):
            self.int63()

    def after_seed(self) -> None:
        self.burn(SEED_LOG_DRAWS)

    def after_tuning(self) -> None:
        self.burn(INFORMER_DRAWS)

    def on_schedule_cycle(self) -> None:
        self.intn(100)  # kube-scheduler plugin-metrics sampling
