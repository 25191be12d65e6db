"""``python -m quasched.cli``: the ``quasched`` command."""

from quasched.cli import app

app()
