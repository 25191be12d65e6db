"""The FGD paper's fragmentation categories of a node for one typical pod, and their column order."""

from __future__ import annotations

CATEGORIES = (
    "q1_lack_both", "q2_lack_gpu", "q3_satisfied", "q4_lack_cpu",
    "xl_satisfied", "xr_lack_cpu", "no_access",
)
Q1, Q2, Q3, Q4, XL, XR, NA = range(7)
