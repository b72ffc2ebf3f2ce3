"""Declared parameter constraints: each constraint's values, the declarations' completeness,
and that every registered mechanism refuses a bad value of every option by its declaration."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from fdptm import cli
from fdptm.errors import BadInputError
from fdptm.mechanisms.constraints import (
    Boolean,
    DatasetUnit,
    Integer,
    ListOf,
    OneOf,
    Real,
    declared,
    param,
    validate_params,
)
from fdptm.mechanisms.registry import MECHANISMS, TUNED
from fdptm.privacy.adjacency import Adjacency

CONTEXT = {
    "n_topics": 3,
    "adjacency": Adjacency.AUTHOR,
    "max_docs_per_author": 2,
    "max_tokens_per_doc": 50,
    "iterations": 4,
}
ALL = [*MECHANISMS.values(), *TUNED.values()]


@pytest.mark.parametrize(
    "constraint,accepted,refused",
    [
        (Integer(1), [1, 7, np.int64(3)], [0, -1, 1.0, True, "2", None]),
        (Integer(0), [0], [-1, False]),
        (Real(0.0), [1e-9, 3, np.float32(2.5)], [0, -1, math.nan, math.inf, True, "1"]),
        (Real(0.0, closed="left"), [0, 0.0, 5], [-1e-12]),
        (Real(0.0, 1.0), [0.5], [0, 1, 1.5]),
        (Real(0.0, 1.0, closed="right"), [1, 0.01], [0]),
        (Real(0.0, 1.0, closed="both"), [0, 1], [1.0000001]),
        (OneOf((1, 2)), [1, 2], [3, True, 1.0, "1"]),
        (OneOf(("a",)), ["a"], ["b", None]),
        (Boolean(), [True, False], [0, 1, "true"]),
        (DatasetUnit((Adjacency.AUTHOR,)), [Adjacency.AUTHOR], [Adjacency.DOCUMENT, "author"]),
    ],
)
def test_constraints_accept_and_refuse(constraint, accepted, refused):
    assert all(constraint.accepts(v) for v in accepted)
    assert not any(constraint.accepts(v) for v in refused)


def test_real_describes_its_interval():
    assert Real(0.0).describe() == "a finite number > 0"
    assert Real(1.0, closed="left").describe() == "a finite number >= 1"
    assert Real(0.0, 1.0).describe() == "a number strictly between 0 and 1"
    assert Real(0.0, 1.0, closed="right").describe() == "a number in (0, 1]"
    assert Real(0.0, 1.0, closed="both").describe() == "a number in [0, 1]"


def test_list_of_parses_items_and_refuses_duplicates():
    clips = ListOf((Real(0.0), OneOf(("private",))))
    assert clips.convert("2, private") == [2.0, "private"]
    assert clips.convert(3) == [3.0]
    assert ListOf((Integer(1),)).convert("50,100") == [50, 100]
    for bad in ("2,2", "", "2,nope", True, "0"):
        assert not clips.accepts(bad), bad
    assert not ListOf((Integer(1),)).accepts("2.5")


def test_param_message_names_the_option_what_it_accepts_and_the_fix():
    p = param(Real(0.0), OneOf(("private",)), what="the bound C", hint="2 is the default")
    assert p.check("clip", "private") == "private"
    assert p.check("clip", 3) == 3.0 and isinstance(p.check("clip", 3), float)
    with pytest.raises(BadInputError) as err:
        p.check("clip", -1)
    assert str(err.value) == (
        "clip (the bound C) must be a finite number > 0 or one of 'private', got -1; "
        "2 is the default"
    )


def test_declarations_must_cover_every_keyword_parameter_and_nothing_else():
    def f(epsilon: float, *, a: int = 1, b: float = 0.5) -> None:
        return None

    with pytest.raises(TypeError, match=r"undeclared \['b'\]"):
        validate_params({"a": param(Integer(1))})(f)
    with pytest.raises(TypeError, match=r"unknown \['c'\]"):
        validate_params({"a": param(Integer(1)), "b": param(Real(0.0)), "c": param(Boolean())})(f)


def test_validated_function_gets_converted_values_and_refuses_before_its_body():
    calls = []

    @validate_params({"n": param(Integer(1)), "x": param(Real(0.0))})
    def f(epsilon: float, *, n: int, x: float = 1) -> tuple:
        calls.append(epsilon)
        return n, x

    n, x = f(1.0, n=np.int64(4))
    assert (type(n), type(x)) == (int, float) and (n, x) == (4, 1.0)
    with pytest.raises(BadInputError, match="n must be an integer >= 1, got 0"):
        f(2.0, n=0)
    assert calls == [1.0]
    assert set(declared(f)) == {"n", "x"}


@pytest.mark.parametrize("mech", ALL, ids=lambda m: m.name)
def test_every_option_is_declared_and_its_default_meets_its_declaration(mech):
    constraints = declared(mech.implementation.params)
    for name, default in mech.options().items():
        assert constraints[name].what, f"{mech.name}: {name} says nothing about itself"
        constraints[name].check(name, default)
    assert [o["name"] for o in mech.describe()["options"]] == list(mech.options())


@pytest.mark.parametrize("mech", ALL, ids=lambda m: m.name)
@pytest.mark.parametrize("bad", ["nope", None, math.nan])
def test_every_option_refuses_a_bad_value_by_its_declaration(mech, bad):
    for name in mech.options():
        with pytest.raises(BadInputError, match=f"^{name} "):
            mech.params(2.0, 1e-5, CONTEXT, {name: bad})


def test_cli_lists_mechanisms_with_their_declared_options(capsys):
    assert cli.main(["mechanisms", "--json"]) == 0
    listed = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert set(listed) == {m.name for m in ALL}
    dp_vi = {o["name"]: o for o in listed["dp-vi"]["options"]}
    assert dp_vi["clip"]["accepts"] == "a number in [1e-12, 1e+12] or one of 'private'"
    assert listed["spectral"]["adjacency"] == {
        "author": "author-replace",
        "document": "document-replace",
    }
    assert cli.main(["mechanisms"]) == 0
    assert "--m2-option sampling_rate=1.0: Poisson sampling probability" in capsys.readouterr().out


def test_m1_mechanisms_meet_the_contract_and_refuse_by_their_declarations():
    from fdptm.mechanisms import bayesian_prior, set_union
    from fdptm.tasks.spec import RunSpec
    from fdptm.tasks.vocabulary import M1_MECHANISMS

    assert set(M1_MECHANISMS) == {"set-union", "extend", "bayesian-prior"}
    spec = RunSpec("r", "w", "d", 2.0, 1e-5, 3, vocabulary="wordfreq:en:100")
    names = {name: m.ledger_name(spec) for name, m in M1_MECHANISMS.items()}
    assert names == {
        "set-union": "dp-set-union/weighted",
        "extend": "dp-set-union/weighted",
        "bayesian-prior": "bayesian-public-prior",
    }
    for m in M1_MECHANISMS.values():
        params = m.params(spec, 1.0, 1e-6)
        assert (params.epsilon, params.delta) == (1.0, 1e-6)
    with pytest.raises(BadInputError, match=r"^policy .* must be one of 'weighted'"):
        set_union.set_union_params("nope", 1.0, 1e-6)
    with pytest.raises(BadInputError, match=r"^max_items \(Delta0"):
        M1_MECHANISMS["set-union"].params(replace(spec, max_items_per_author=0), 1.0, 1e-6)
    with pytest.raises(BadInputError, match=r"^clip \(C, "):
        bayesian_prior.calibrate(1.0, 1e-6, scale=0.1, clip=0, max_words=5)
