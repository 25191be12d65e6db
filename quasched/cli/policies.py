"""``quasched policies``: the placement policies, what each is for and its parameters."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from quasched.cli.common import console


def policies() -> None:
    """List the placement policies: name, purpose, what each does (and its measured effect), parameters.

    Use one with --policy NAME or NAME:PARAM=VALUE,... (simulate, sweep, replay, serve)."""
    from quasched.policies.registry import REGISTRY

    table = Table(show_lines=True)
    for column in ("name", "purpose", "what it does", "parameters (NAME: type = default)"):
        table.add_column(column, overflow="fold")
    for name, summary, params in REGISTRY.describe():
        table.add_row(name, REGISTRY.get(name).purpose, escape(summary), escape(params) or "-")
    console.print(table)
