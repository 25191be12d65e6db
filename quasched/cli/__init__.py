"""Command line: ``quasched policies``, ``simulate``, ``sweep``, ``replay``, ``batch``, ``federation``,
``carbon-signal``, ``traces list|show``; the service ``quasched serve`` and its clients ``submit``, ``jobs``, ``queues``, ``queue``, ``nodes``, ``cancel``,
``logs``, ``usage``, ``token``; the federation front ``federate``; ``device-plugin`` on Kubernetes GPU nodes. This module assembles the typer app (the order of registration is the order of
``--help``); the commands live in ``common`` (shared options and checks), ``policies``, ``experiments``, ``replay``,
``federation``, ``signals``, ``federate``, ``serve``, ``client``, ``runs`` and ``node``."""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from quasched.cli import client, runs
from quasched.cli.common import fail
from quasched.cli.experiments import simulate, sweep, traces_list, traces_show
from quasched.cli.federate import federate
from quasched.cli.federation import federation
from quasched.cli.signals import carbon_signal
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


#: click's ``UsageError`` as typer raises it (typer 0.20 and later ship their own copy of click)
UsageError: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


@contextlib.contextmanager
def usage_errors_as_lines() -> Iterator[None]:
    """A usage error (a bad option value, an unknown option or command) as one ``error:`` line on stderr and the
    ``--help`` hint, the form of every other error (:func:`~quasched.cli.common.fail`), exit code 2."""
    try:
        yield
    except UsageError as err:
        if type(err).__name__ == "NoArgsIsHelpError":  # a group without a command: typer prints its help
            raise
        ctx: typer.Context | None = getattr(err, "ctx", None)
        hint = f"\nTry '{ctx.command_path} --help' for help." if ctx is not None else ""
        message = getattr(err, "format_message")()
        Console(stderr=True).print(f"[bold red]error:[/] {escape(message)}{hint}", soft_wrap=True, emoji=False)
        raise typer.Exit(2) from None


class OneErrorForm(TyperGroup):
    """The ``quasched`` group: its and its commands' usage errors through :func:`usage_errors_as_lines`."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        with usage_errors_as_lines():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: Any) -> Any:
        with usage_errors_as_lines():
            return super().invoke(ctx)


app = typer.Typer(
    cls=OneErrorForm,
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
app.command("carbon-signal")(with_clean_errors(carbon_signal))
app.command()(with_clean_errors(federate))
app.command("device-plugin")(with_clean_errors(device_plugin))


def one_line_summaries(typer_app: typer.Typer) -> None:
    """The command list of ``--help`` shows each docstring's first paragraph with its line breaks (rich
    markup mode): give it that paragraph on one line."""
    for command in typer_app.registered_commands:
        if command.callback is not None and command.short_help is None:
            command.short_help = " ".join((command.callback.__doc__ or "").split("\n\n")[0].split())


one_line_summaries(app)
