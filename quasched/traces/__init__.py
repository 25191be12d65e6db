"""Trace files: locating, loading and validating them, plus a synthetic generator.

``load_trace(name)`` is the entry point; ``list_traces()`` names what exists;
``load_inputs`` mixes a trace with a user's cluster file and/or workload file.
"""

from quasched.traces.catalog import (
    CATALOG,
    TraceInfo,
    describe,
    list_traces,
    load_inputs,
    load_trace,
    trace_info,
)
from quasched.traces.cluster_file import load_cluster_file
from quasched.traces.datadir import ENV_VAR, cache_dir, resolve_trace, upstream_url
from quasched.traces.dlrm import dlrm_cluster, load_dlrm, peak_demand
from quasched.traces.errors import TraceError, TraceNotFound
from quasched.traces.openb import load_openb_nodes, load_openb_pods
from quasched.traces.synthetic import synthetic_cluster, synthetic_workload
from quasched.traces.workload_file import load_workload_file

__all__ = [
    "CATALOG", "TraceInfo", "describe", "list_traces", "load_inputs", "load_trace", "trace_info",
    "ENV_VAR", "cache_dir", "resolve_trace", "upstream_url",
    "dlrm_cluster", "load_dlrm", "peak_demand",
    "TraceError", "TraceNotFound",
    "load_openb_nodes", "load_openb_pods",
    "synthetic_cluster", "synthetic_workload",
    "load_cluster_file", "load_workload_file",
]
