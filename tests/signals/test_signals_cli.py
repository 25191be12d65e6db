"""``quasched carbon-signal``: the next hours from the file (with its attribution) or a live API, WattTime's index
beside its MOER, and one ``error:`` line (exit 2) for a missing credential or no answer."""

from __future__ import annotations

import re
import time

from signal_api import H, em_forecast, em_point, wt_index, wt_points
from typer.testing import CliRunner

from quasched.cli import app
from quasched.signals.base import hour_of
from quasched.traces.carbon import ATTRIBUTION, FILE_NAME

runner = CliRunner()
UNSET = {"ELECTRICITYMAPS_API_TOKEN": None, "ELECTRICITYMAPS_API_TOKEN_FILE": None, "WATTTIME_USERNAME": None,
         "WATTTIME_USERNAME_FILE": None, "WATTTIME_PASSWORD": None, "WATTTIME_PASSWORD_FILE": None}


def run(*args: str, **env: str | None) -> tuple[int, str]:
    result = runner.invoke(app, ["carbon-signal", *args], env={"COLUMNS": "200", **UNSET, **env})
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, " ".join(re.sub(r"[│┃]", " ", result.output).split())


def test_the_file_source_prints_the_hours_and_the_attribution(tmp_path):
    rows = [f"2023-01-01 {h:02d}:00:00,XX,42.5,50,0" for h in range(24)]
    (tmp_path / FILE_NAME).write_text("datetime_utc,zone,direct_gco2_per_kwh,lca_gco2_per_kwh,estimated\n"
                                      + "\n".join(rows) + "\n")
    code, out = run("--source", "file", "--zone", "XX", "--hours", "3", "--carbon-dir", str(tmp_path))
    assert code == 0 and out.count(" 42.5 ") == 3 and out.endswith(ATTRIBUTION)


def test_electricitymaps_live(api):
    now = hour_of(time.time())
    api.answer("/v3/carbon-intensity/latest", em_point("DE", now, 300.0))
    api.answer("/v3/carbon-intensity/forecast", em_forecast("DE", now + H, [200.0], updated=now))
    code, out = run("--source", "electricitymaps", "--zone", "DE", "--base-url", api.url,
                    ELECTRICITYMAPS_API_TOKEN="token")
    assert code == 0 and "electricitymaps DE: gCO2eq/kWh, issued" in out and out.count(" 200.0 ") >= 23
    assert out.endswith("live data under Electricity Maps' terms")
    assert api.requests[0].headers["auth-token"] == "token"


def test_watttime_prints_its_index_beside_the_moer(api):
    now = hour_of(time.time())
    api.answer("/login", {"token": "t"})
    api.answer("/v3/forecast", wt_points("CAISO_NORTH", now, [1000.0] * 12, generated=now))
    api.answer("/v3/signal-index", wt_index("CAISO_NORTH", now, 37.0))
    code, out = run("--source", "watttime", "--zone", "CAISO_NORTH", "--hours", "2", "--base-url", api.url,
                    WATTTIME_USERNAME="ada", WATTTIME_PASSWORD="pw")
    assert code == 0 and out.count(" 453.6 ") == 2 and "WattTime index 37 of 100" in out and "not an intensity" in out


def test_a_missing_credential_or_no_answer_is_one_error_line(api):
    assert run("--source", "electricitymaps", "--zone", "DE") == (
        2, "error: set ELECTRICITYMAPS_API_TOKEN (or ELECTRICITYMAPS_API_TOKEN_FILE, the path of a file holding it)")
    code, out = run("--source", "electricitymaps", "--zone", "DE", "--base-url", api.url,
                    ELECTRICITYMAPS_API_TOKEN="token")
    assert (code, out) == (2, "error: electricitymaps DE: GET /v3/carbon-intensity/latest: HTTP 404; no good forecast "
                              "yet")
