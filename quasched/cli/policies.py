"""``quasched policies``: the placement policies and the federation's dispatchers, what each is for and its parameters."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from quasched.cli.common import console


def policies() -> None:
    """List the placement policies (name, purpose, what each does and its measured effect, parameters), then the
    federation's dispatchers.

    Use a policy with --policy NAME or NAME:PARAM=VALUE,... (simulate, sweep, replay, serve), a dispatcher with
    quasched federation --dispatchers 'NAME:PARAM=VALUE,...;...'."""
    from quasched.federation.registry import REGISTRY as DISPATCHERS
    from quasched.policies.registry import REGISTRY

    table = Table(show_lines=True)
    for column in ("name", "purpose", "what it does", "parameters (NAME: type = default)"):
        table.add_column(column, overflow="fold")
    for name, summary, params in REGISTRY.describe():
        table.add_row(name, REGISTRY.get(name).purpose, escape(summary), escape(params) or "-")
    console.print(table)
    dispatchers = Table(title="federation dispatchers (quasched federation --dispatchers)", show_lines=True)
    for column in ("name", "what it does", "parameters (NAME: type = default)"):
        dispatchers.add_column(column, overflow="fold")
    for name, summary, params in DISPATCHERS.describe():
        dispatchers.add_row(name, escape(summary), escape(params) or "-")
    dispatchers.add_row("oracle-bound, oracle-plan, oracle", "offline, with --oracle: the LP bound, its plan replayed, "
                        "and the cheapest derated plan missing at most as many deadlines as the last dispatcher", "-")
    console.print(dispatchers)
