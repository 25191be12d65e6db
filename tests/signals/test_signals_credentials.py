"""Credentials come from a variable or the file its ``_FILE`` names; a missing one is one line naming the variable."""

from __future__ import annotations

import pytest

from quasched.signals import ElectricityMaps, MissingCredential, WattTime

VARIABLES = ("ELECTRICITYMAPS_API_TOKEN", "WATTTIME_USERNAME", "WATTTIME_PASSWORD")


@pytest.fixture(autouse=True)
def no_credentials(monkeypatch):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"{name}_FILE", raising=False)


def test_a_missing_credential_names_its_variable(monkeypatch):
    with pytest.raises(MissingCredential, match=r"^set ELECTRICITYMAPS_API_TOKEN \(or ELECTRICITYMAPS_API_TOKEN_FILE, "
                                                r"the path of a file holding it\)$"):
        ElectricityMaps()
    with pytest.raises(MissingCredential, match="^set WATTTIME_USERNAME "):
        WattTime()
    monkeypatch.setenv("WATTTIME_USERNAME", "ada")
    with pytest.raises(MissingCredential, match="^set WATTTIME_PASSWORD "):
        WattTime()


def test_credentials_from_variables_and_files(monkeypatch, tmp_path):
    monkeypatch.setenv("ELECTRICITYMAPS_API_TOKEN", "from-env")
    assert ElectricityMaps().token == "from-env"
    (tmp_path / "password").write_text("from-file\n")
    monkeypatch.setenv("WATTTIME_USERNAME", "ada")
    monkeypatch.setenv("WATTTIME_PASSWORD_FILE", str(tmp_path / "password"))
    assert (WattTime().username, WattTime().password) == ("ada", "from-file")
    monkeypatch.setenv("WATTTIME_PASSWORD_FILE", str(tmp_path / "none"))
    with pytest.raises(MissingCredential, match=f"^cannot read WATTTIME_PASSWORD_FILE={tmp_path / 'none'}: "):
        WattTime()
    (tmp_path / "empty").write_text("\n")
    monkeypatch.setenv("WATTTIME_PASSWORD_FILE", str(tmp_path / "empty"))
    with pytest.raises(MissingCredential, match="^WATTTIME_PASSWORD_FILE=.* is empty$"):
        WattTime()
