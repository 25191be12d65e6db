"""Command line: ``quasched policies``, ``simulate``, ``sweep``, ``replay``, ``batch``, ``federation``, ``traces list|show``;
the service ``quasched serve`` and its clients ``submit``, ``jobs``, ``queues``, ``queue``, ``nodes``, ``cancel``,
``logs``, ``usage``, ``token``; ``device-plugin`` on Kubernetes GPU nodes. This module assembles the typer app (the order of registration is the order of
``--help``); the commands live in ``common`` (shared options and checks), ``policies``, ``experiments``, ``replay``,
``federation``, ``serve``, ``client``, ``runs`` and ``node``."""

from __future__ import annotations

import functools
from typing import Any, Callable

import typer

from quasched.cli import client, runs
from quasched.cli.common import fail
from quasched.cli.experiments import simulate, sweep, traces_list, traces_show
from quasched.cli.federation import federation
from quasched.cli.policies import policies
from quasched.cli.node import device_plugin
from quasched.cli.replay import replay
from quasched.cli.serve import serve
from quasched.extras import MissingExtra
from quasched.cli.batch import batch

__all__ = ["app"]


def with_clean_errors(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` as a command: one that needs an optional dependency which is not installed fails with the
    ``pip install`` that adds it (:mod:`quasched.extras`), not a traceback."""

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except MissingExtra as err:
            fail(str(err))

    return run


app = typer.Typer(
    help="Placement policies, trace-driven simulation and batch optimisation for GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
traces_app = typer.Typer(help="Inspect the workload traces quasched can load.", no_args_is_help=True)
app.add_typer(traces_app, name="traces")
traces_app.command("list")(with_clean_errors(traces_list))
traces_app.command("show")(with_clean_errors(traces_show))
for function in (policies, batch, federation, simulate, sweep, replay, serve, client.submit, client.jobs, client.queues,
                client.queue, client.nodes, client.job, client.cancel, client.complete, runs.logs, runs.usage, client.token,
                 client.tokens):
    app.command()(with_clean_errors(function))
app.command("device-plugin")(with_clean_errors(device_plugin))


def one_line_summaries(typer_app: typer.Typer) -> None:
    """The command list of ``--help`` shows each docstring's first paragraph with its line breaks (rich
    markup mode): give it that paragraph on one line."""
    for command in typer_app.registered_commands:
        if command.callback is not None and command.short_help is None:
            command.short_help = " ".join((command.callback.__doc__ or "").split("\n\n")[0].split())


one_line_summaries(app)
