"""Compiled fragmentation kernels (numba): one node state at a time, no NumPy call overhead.

The arithmetic is that of :meth:`FragmentationModel.vectors
<quasched.metrics.fragmentation.FragmentationModel.vectors>` in the same float order:
each category accumulates ``freq[t] * milli`` over the typical pods ``t`` in order
(NumPy's cumulative sum), and the fragment amount adds the categories
``Q1, Q2, Q4, XL, XR, NA`` in that order. Integer sums are exact, so device order
does not matter. ``cache=True`` keeps the compiled code in ``__pycache__``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from quasched.metrics.frag_categories import NA, Q1, Q2, Q3, Q4, XL, XR


@njit(cache=True, nogil=True)
def _vector(cpu, gpu, model, t_cpu, t_milli, t_count, freq, access, out):  # pragma: no cover - compiled
    """Category vector of one state (``out``, 7 zeros on entry)."""
    idle = 0
    for d in range(len(gpu)):
        idle += gpu[d]
    for t in range(len(t_milli)):
        milli = t_milli[t]
        fitting = 0
        n_fit = 0
        for d in range(len(gpu)):
            if gpu[d] >= milli:
                fitting += gpu[d]
                n_fit += 1
        cpu_ok = cpu >= t_cpu[t]
        if milli == 0:
            out[XL if cpu_ok else XR] += freq[t] * idle
        elif not access[model, t]:
            out[NA] += freq[t] * idle
        elif n_fit >= t_count[t]:
            if cpu_ok:
                out[Q3] += freq[t] * fitting
                out[Q2] += freq[t] * (idle - fitting)
            else:
                out[Q4] += freq[t] * idle
        else:
            out[Q2 if cpu_ok else Q1] += freq[t] * idle


@njit(cache=True, nogil=True)
def _amount(v):  # pragma: no cover - compiled
    return 0.0 + v[Q1] + v[Q2] + v[Q4] + v[XL] + v[XR] + v[NA]


@njit(cache=True, nogil=True)
def vectors(cpu, gpu, model, t_cpu, t_milli, t_count, freq, access):  # pragma: no cover - compiled
    """``(S, 7)`` category vectors of states ``(cpu[S], gpu[S, D], model[S])``."""
    out = np.zeros((len(cpu), 7))
    for s in range(len(cpu)):
        _vector(cpu[s], gpu[s], model[s], t_cpu, t_milli, t_count, freq, access, out[s])
    return out


@njit(cache=True, nogil=True)
def amounts(vectors):  # pragma: no cover - compiled
    """Fragment amount of each row of ``vectors`` (:func:`~quasched.metrics.fragmentation.frag_amount`)."""
    out = np.empty(len(vectors))
    for s in range(len(vectors)):
        out[s] = _amount(vectors[s])
    return out


@njit(cache=True, nogil=True)
def deltas(cpu, gpu, model, before, milli, count, sharing,
           t_cpu, t_milli, t_count, freq, access):  # pragma: no cover - compiled
    """``before - amount(after)`` of a pod on states ``(cpu[S] after the pod, gpu[S, D] ascending, model[S])``.

    A sharing pod (``sharing``) is tried on every distinct fitting column: ``(S, D)``, NaN
    elsewhere. Any other pod takes the ``count`` smallest fitting devices: ``(S, 1)``.
    """
    n, width = gpu.shape
    out = np.full((n, width if sharing else 1), np.nan)
    vec = np.zeros(7)
    for s in range(n):
        after = gpu[s].copy()
        if not sharing:
            left = count if milli > 0 else 0
            for d in range(width):
                if left > 0 and after[d] >= milli:
                    after[d] -= milli
                    left -= 1
            vec[:] = 0.0
            _vector(cpu[s], after, model[s], t_cpu, t_milli, t_count, freq, access, vec)
            out[s, 0] = before[s] - _amount(vec)
            continue
        for c in range(width):
            if gpu[s, c] < milli or (c > 0 and gpu[s, c] == gpu[s, c - 1]):
                continue
            after[c] -= milli
            vec[:] = 0.0
            _vector(cpu[s], after, model[s], t_cpu, t_milli, t_count, freq, access, vec)
            out[s, c] = before[s] - _amount(vec)
            after[c] += milli
    return out


@njit(cache=True, nogil=True)
def refold(blocks, rows, first, size):  # pragma: no cover - compiled
    """Folds ``rows`` (one 7-vector per node slot) in slot order, restarting at the block of ``size``
    slots that holds ``first``; ``blocks[b]`` = the fold of slots ``[0, (b + 1) size)`` (the last:
    of all), in place. Seven scalar accumulators: the same adds, in registers."""
    start = first // size
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = 0.0
    if start > 0:
        a0, a1, a2, a3, a4, a5, a6 = blocks[start - 1]
    for b in range(start, len(blocks)):
        for i in range(b * size, min(len(rows), (b + 1) * size)):
            a0 += rows[i, 0]
            a1 += rows[i, 1]
            a2 += rows[i, 2]
            a3 += rows[i, 3]
            a4 += rows[i, 4]
            a5 += rows[i, 5]
            a6 += rows[i, 6]
        blocks[b, 0], blocks[b, 1], blocks[b, 2], blocks[b, 3] = a0, a1, a2, a3
        blocks[b, 4], blocks[b, 5], blocks[b, 6] = a4, a5, a6
