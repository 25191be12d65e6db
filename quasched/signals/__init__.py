"""Carbon-intensity signals for live dispatch: one :class:`Signal` interface over the offline file
(:class:`FileSignal`) and the live APIs of Electricity Maps (average intensity) and WattTime (marginal emissions),
whose :class:`LiveSignal` falls back to the last good answer, marked stale, when a call fails. docs/federation.md,
"Live carbon signals"."""

from quasched.signals.base import MissingCredential, NoSignal, Reading, Signal, SignalError, Unavailable
from quasched.signals.electricitymaps import ElectricityMaps
from quasched.signals.file import FileSignal
from quasched.signals.live import LiveSignal
from quasched.signals.watttime import Index, WattTime

__all__ = ["ElectricityMaps", "FileSignal", "Index", "LiveSignal", "MissingCredential", "NoSignal", "Reading",
           "Signal", "SignalError", "Unavailable", "WattTime"]
