"""Everything specific to reproducing the FGD artifact (Weng et al., ATC'23, Go simulator).

- :mod:`~quasched.compat.gorand`: Go ``math/rand`` port and the Go simulator's extra draws
  (``rng="go"``), seeded from the packaged ``rngCooked`` table in ``data/``.
- :mod:`~quasched.compat.curves`: the artifact's post-processing (curves binned by arrived %).
- :mod:`~quasched.compat.artifact`: the artifact's CSV layouts and numbered policy labels.
- :mod:`~quasched.compat.golden`: comparison with the published curves and per-event logs.

quasched.model, quasched.policies and quasched.metrics never import it; ``rng="go"``
imports :class:`~quasched.compat.gorand.GoRand` lazily.
"""
