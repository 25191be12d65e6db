"""Carbon-aware dispatch over a federation of clusters in different grid zones (docs/federation.md)."""
