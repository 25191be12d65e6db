"""Typed parameters and the generic registry: parsing, defaults, and errors that name what to write."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from quasched.params import Param, Registry, parse_params

PARAMS = (Param("beta", float, 8.0, "weight", minimum=0.0), Param("learn", bool, True, "learn online"),
          Param("scale", str, "sigmoid", "normalisation", ("sigmoid", "linear")))


@dataclass(frozen=True)
class Thing:
    name: str
    summary: str
    params: tuple[Param, ...] = ()


def test_given_parameters_are_parsed_and_the_rest_default():
    assert parse_params("policy x", PARAMS, " beta = 2 ,learn=FALSE") == {"beta": 2.0, "learn": False, "scale": "sigmoid"}
    assert parse_params("policy x", PARAMS, "") == {"beta": 8.0, "learn": True, "scale": "sigmoid"}


@pytest.mark.parametrize("text, says", [
    ("gamma=1", "policy x: bad parameter 'gamma=1' (parameters: beta, learn, scale)"),
    ("beta", "policy x: bad parameter 'beta' (parameters: beta, learn, scale)"),
    ("beta=-1", "policy x: parameter beta='-1' must be at least 0"),
    ("beta=nan", "policy x: parameter beta='nan' must be a finite number"),
    ("beta=two", "policy x: parameter beta='two' is not a float"),
    ("learn=yes", "policy x: parameter learn='yes' is not a bool"),
    ("scale=log", "policy x: parameter scale='log': choose from sigmoid, linear"),
])
def test_bad_parameters_name_owner_parameter_and_choices(text, says):
    with pytest.raises(ValueError) as err:
        parse_params("policy x", PARAMS, text)
    assert str(err.value) == says


def test_check_refuses_a_value_that_parses():
    def even(value: int) -> None:
        if value % 2:
            raise ValueError("must be even")

    assert parse_params("d", (Param("n", int, 0, "count", check=even),), "n=4") == {"n": 4}
    with pytest.raises(ValueError, match=r"^d: parameter n='3': must be even$"):
        parse_params("d", (Param("n", int, 0, "count", check=even),), "n=3")


def test_registry_finds_parses_and_lists_entries():
    things: Registry[Thing] = Registry("dispatcher")
    plain = things.register(Thing("plain", "does one thing"))
    tuned = things.register(Thing("tuned", "does it with a knob", PARAMS[:1]))
    assert things.names() == ("plain", "tuned") and list(things) == ["plain", "tuned"] and len(things) == 2
    assert "tuned" in things and "other" not in things
    assert things.get("tuned") is tuned and things.entries() == (plain, tuned)
    assert things.parse(" tuned:beta=3") == (tuned, {"beta": 3.0})
    assert things.describe() == [("plain", "does one thing", ""),
                                 ("tuned", "does it with a knob", "beta: float = 8.0 (at least 0): weight")]
    with pytest.raises(ValueError, match=r"^unknown dispatcher 'other'; choose from plain, tuned$"):
        things.parse("other:beta=1")
    with pytest.raises(ValueError, match=r"^dispatcher plain: bad parameter 'beta=1' \(parameters: none\)$"):
        things.parse("plain:beta=1")
    with pytest.raises(ValueError, match="already registered"):
        things.register(Thing("plain", "again"))
