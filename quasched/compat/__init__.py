"""Everything specific to reproducing the FGD artifact (Weng et al., ATC'23, Go simulator).

- :mod:`~quasched.compat.curves`: the artifact's post-processing (curves binned by arrived %).
- :mod:`~quasched.compat.artifact`: the artifact's CSV layouts and numbered policy labels.
- :mod:`~quasched.compat.golden`: comparison with the published curves and per-event logs.

The Go random stream itself (``rng="go"``) is a random stream like NumPy's: :mod:`quasched.model.gorand`.
"""
