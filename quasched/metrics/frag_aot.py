"""Ahead-of-time build of the fragmentation kernels: a plain extension module, no numba at run time.

A process that uses the JIT kernels (:mod:`quasched.metrics.frag_kernel`) pays about 0.5 s
once for importing numba and loading the cached machine code. Built ahead of time with
``numba.pycc`` from the same functions (so the same machine arithmetic, bit for bit), the
module imports in about a millisecond::

    python -m quasched.metrics.frag_aot          # once per install, after a change of frag_kernel.py

It is named after a digest of ``frag_kernel.py``'s source (:func:`module_name`), so a stale
build is never loaded: :func:`quasched.metrics.fragmentation.kernels` falls back to the JIT.
"""

from __future__ import annotations

import hashlib
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).parent
_I1, _I2, _F1, _F2, _B2 = "i8[::1]", "i8[:,::1]", "f8[::1]", "f8[:,::1]", "b1[:,::1]"
#: each kernel's one compiled signature (C-contiguous arrays, as :mod:`~quasched.metrics.fragmentation` passes them)
SIGNATURES = {
    "vectors": f"{_F2}({_I1}, {_I2}, {_I1}, {_I1}, {_I1}, {_I1}, {_F1}, {_B2})",
    "amounts": f"{_F1}({_F2})",
    "deltas": f"{_F2}({_I1}, {_I2}, {_I1}, {_F1}, i8, i8, b1, {_I1}, {_I1}, {_I1}, {_F1}, {_B2})",
    "refold": f"void({_F2}, {_F2}, i8, i8)",
}


def module_name() -> str:
    """``_frag_aot_<digest of frag_kernel.py, its constants and the signatures>``."""
    source = b"".join((HERE / name).read_bytes() for name in ("frag_kernel.py", "frag_categories.py"))
    source += repr(sorted(SIGNATURES.items())).encode()
    return f"_frag_aot_{hashlib.sha256(source).hexdigest()[:12]}"


def build(out_dir: Path = HERE) -> Path:
    """Compile the kernels into ``out_dir`` (needs numba and a C compiler); returns the module's path."""
    with warnings.catch_warnings():  # pycc is "pending deprecation" (numba 0.57+) with no replacement yet
        warnings.simplefilter("ignore")
        from numba.pycc import CC

    from quasched.metrics import frag_kernel

    cc = CC(module_name())
    cc.output_dir = str(out_dir)
    for name, signature in SIGNATURES.items():
        cc.export(name, signature)(getattr(frag_kernel, name).py_func)
    cc.compile()
    return out_dir / cc.output_file


if __name__ == "__main__":  # pragma: no cover - exercised by the test through build()
    print(build(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE))
