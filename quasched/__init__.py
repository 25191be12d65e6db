"""quasched: placement policies, trace-driven simulation and batch optimisation for GPU clusters."""

__version__ = "0.1.0"
