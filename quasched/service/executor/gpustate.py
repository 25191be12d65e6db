"""The GPUs' live state from NVML, and which devices new pods should avoid because of it.

Read per device (``nvidia-ml-py``, extra ``gpu``; a field the device does not support is None): temperature, power
draw and enforced limit, utilisation, memory used and total, the clock-throttle reasons and the volatile count of
uncorrected ECC errors. A device is **avoided** (no new pod placed on it; the pods on it keep running) while it is
hot (at or above ``hot_c``, until it cools below ``cool_c``), slowed down by heat, a power brake or a hardware
fault, has fallen off the bus, or counts more uncorrected ECC errors than when first seen. A reading older than
``stale_s`` is not trusted: it changes nothing (docs/service.md, "The GPUs' live state").
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping

#: NVML's clock-throttle reason bits (nvml.h, ``nvmlClocksThrottleReason*``) by the name quasched reports
THROTTLE_BITS = {"gpu_idle": 0x1, "applications_clocks": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
                 "sync_boost": 0x10, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40,
                 "hw_power_brake_slowdown": 0x80, "display_clocks": 0x100}
#: the reasons that mean heat, a power brake or a fault holds the device back (not idling or a cap it was set to)
SLOWDOWNS = ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
#: NVML's constants used here (nvml.h): NVML_TEMPERATURE_GPU, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC
TEMPERATURE_GPU, UNCORRECTED, VOLATILE = 0, 1, 0
#: seconds between readings
READ_S = 10.0


@dataclass(frozen=True)
class GpuReading:
    """One device's state at wall time ``at`` (None: not supported or not read)."""

    device: int
    at: float
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    utilization_pct: float | None = None
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    throttle: tuple[str, ...] = ()
    ecc_uncorrected: int | None = None
    lost: bool = False

    @property
    def headroom_w(self) -> float | None:
        """Enforced power limit − draw, W, at least 0 (None without both): an idle device's idle→full swing."""
        if self.power_w is None or self.power_limit_w is None:
            return None
        return max(0.0, self.power_limit_w - self.power_w)

    def to_json(self) -> dict[str, Any]:
        kept = {k: v for k, v in asdict(self).items() if v is not None and v is not False}
        return kept | {"throttle": list(self.throttle)}

    @classmethod
    def of_json(cls, data: Mapping[str, Any]) -> GpuReading:
        """A reading from :meth:`to_json`'s form; ValueError naming the field that is wrong."""
        def number(key: str, kind: type = float) -> Any:
            value = data.get(key)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                raise ValueError(f"{key}: a number, not {value!r}")
            return kind(value)

        device, at = number("device", int), number("at")
        if device is None or at is None or device < 0:
            raise ValueError("device and at are required (device >= 0)")
        throttle = data.get("throttle") or []
        if not isinstance(throttle, list) or not all(t in THROTTLE_BITS for t in throttle):
            raise ValueError(f"throttle: names among {sorted(THROTTLE_BITS)}")
        return cls(device, at, number("temperature_c"), number("power_w"), number("power_limit_w"),
                   number("utilization_pct"), number("memory_used_mib", int), number("memory_total_mib", int),
                   tuple(throttle), number("ecc_uncorrected", int), bool(data.get("lost", False)))


@dataclass(frozen=True)
class Limits:
    """When a device is avoided (module docstring)."""

    hot_c: float = 85.0
    cool_c: float = 80.0
    stale_s: float = 60.0

    def stale(self, reading: GpuReading, now: float) -> bool:
        """Whether ``reading`` is too old at ``now`` to be trusted."""
        return now - reading.at > self.stale_s


@dataclass
class Judge:
    """Which devices of one node to avoid, reading after reading (it remembers what it avoided, for the cooling
    hysteresis, and each device's first ECC count)."""

    limits: Limits = field(default_factory=Limits)
    avoided: dict[int, str] = field(default_factory=dict)
    ecc_first: dict[int, int] = field(default_factory=dict)

    def why(self, reading: GpuReading) -> str | None:
        """Why new pods should avoid the device now, or None."""
        lim, t = self.limits, reading.temperature_c
        if reading.lost:
            return "fell off the bus"
        hot = "temperature" in self.avoided.get(reading.device, "")
        if t is not None and (t >= lim.hot_c or (hot and t >= lim.cool_c)):
            return f"temperature {t:.0f} °C (avoided from {lim.hot_c:.0f} until below {lim.cool_c:.0f})"
        slow = [s for s in SLOWDOWNS if s in reading.throttle]
        if slow:
            return "throttling: " + ", ".join(slow)
        if reading.ecc_uncorrected is not None:
            first = self.ecc_first.setdefault(reading.device, reading.ecc_uncorrected)
            if reading.ecc_uncorrected > first:
                return f"{reading.ecc_uncorrected - first} new uncorrected ECC errors"
        return None

    def judge(self, readings: list[GpuReading], now: float) -> dict[int, str]:
        """The devices to avoid after ``readings``, remembered for the next time; a stale reading changes nothing
        (its device stays avoided, or not, as it was)."""
        avoided = {}
        for r in readings:
            why = self.avoided.get(r.device) if self.limits.stale(r, now) else self.why(r)
            if why is not None:
                avoided[r.device] = why
        self.avoided = avoided
        return dict(avoided)


def read(nvml: Any, handles: list[Any], now: float | None = None) -> list[GpuReading]:
    """Every device's state from NVML, one call per field (a field the device refuses is None)."""
    now = time.time() if now is None else now
    out = []
    for device, h in enumerate(handles):
        def get(call: Callable[[], Any]) -> Any:
            try:
                return call()
            except nvml.NVMLError:
                return None

        try:
            nvml.nvmlDeviceGetUUID(h)
        except nvml.NVMLError_GpuIsLost:
            out.append(GpuReading(device, now, lost=True))
            continue
        except nvml.NVMLError:
            pass
        memory = get(lambda: nvml.nvmlDeviceGetMemoryInfo(h))
        bits = get(lambda: nvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)) or 0
        power, limit = get(lambda: nvml.nvmlDeviceGetPowerUsage(h)), get(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(h))
        util = get(lambda: nvml.nvmlDeviceGetUtilizationRates(h))
        temperature = get(lambda: nvml.nvmlDeviceGetTemperature(h, TEMPERATURE_GPU))
        out.append(GpuReading(
            device, now, None if temperature is None else float(temperature),
            None if power is None else power / 1000.0, None if limit is None else limit / 1000.0,  # NVML: milliwatts
            None if util is None else float(util.gpu),
            None if memory is None else int(memory.used) >> 20, None if memory is None else int(memory.total) >> 20,
            tuple(name for name, bit in THROTTLE_BITS.items() if bits & bit),
            get(lambda: nvml.nvmlDeviceGetTotalEccErrors(h, UNCORRECTED, VOLATILE))))
    return out


class Sampler:
    """Reads this machine's GPUs every ``interval_s`` and hands each round to ``report`` (a thread)."""

    def __init__(self, nvml: Any, report: Callable[[list[GpuReading]], object], interval_s: float = READ_S) -> None:
        self.nvml, self.report, self.interval_s = nvml, report, interval_s
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def once(self) -> None:
        """One round: read every device and report it."""
        self.report(read(self.nvml, self.handles))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="quasched-gpu-state", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 2)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.once()
            except Exception as err:  # never the thread's end: the next round tries again
                print(f"quasched: reading the GPUs' state failed: {err}", flush=True)
            self._stop.wait(self.interval_s)
