"""Calibration happens once per run and is stored: the JSON round trip of every mechanism's
calibrated parameters is exact, a process calibrates one request once, and the request
model is the one place release defaults live."""

from __future__ import annotations

import json

import pytest

from fdptm.codec import decode, encode
from fdptm.mechanisms.registry import DEFAULT_MECHANISM, MECHANISMS
from fdptm.privacy.adjacency import Adjacency
from fdptm.request import ReleaseRequest
from fdptm.tasks import run as lifecycle
from fdptm.tasks.spec import RunSpec


def _spec(mechanism: str, **fields) -> RunSpec:
    request = ReleaseRequest(
        dataset="d",
        epsilon=5.0,
        delta=1e-5,
        topics=3,
        mechanism=mechanism,
        allow_unproven=True,
        **fields,
    )
    return RunSpec.from_request(request, "d-0123456789abcdef", "/nowhere")


@pytest.mark.parametrize("mechanism", sorted(MECHANISMS))
@pytest.mark.parametrize("unit", [Adjacency.DOCUMENT, Adjacency.AUTHOR])
def test_every_calibration_survives_the_catalog_round_trip(mechanism, unit):
    calibration = lifecycle.calibrate(_spec(mechanism), unit)
    stored = json.loads(json.dumps(encode(calibration)))
    assert decode(stored) == calibration
    assert decode(stored).m2.to_dict() == calibration.m2.to_dict()


def test_a_process_calibrates_a_request_once():
    lifecycle._calibrated.cache_clear()
    spec = _spec("dp-vi", iterations=7)
    first = lifecycle.calibrate(spec, Adjacency.DOCUMENT)
    again = lifecycle.calibrate(
        RunSpec.from_request(
            ReleaseRequest(
                dataset="d",
                epsilon=5.0,
                delta=1e-5,
                topics=3,
                iterations=7,
                seed=11,
                allow_unproven=True,
                mechanism="dp-vi",
            ),
            "d-fedcba9876543210",
            "/elsewhere",
        ),
        Adjacency.DOCUMENT,
    )
    info = lifecycle._calibrated.cache_info()
    assert (info.misses, info.hits) == (1, 1)  # run id, workspace and seed do not matter
    assert again.m2 is first.m2
    lifecycle.calibrate(_spec("dp-vi", iterations=8), Adjacency.DOCUMENT)
    assert lifecycle._calibrated.cache_info().misses == 2


def test_decoding_refuses_classes_outside_the_package():
    with pytest.raises(ValueError, match="not an fdptm class"):
        decode({"__type__": "subprocess:Popen", "args": ["true"]})


def test_release_defaults_are_the_request_models():
    """The CLI, the flows' RunSpec and the deployments read the defaults from one model."""
    from fdptm.cli import build_parser
    from fdptm.deployments.scheduled_release import release_parser
    from fdptm.request import from_arguments

    required = ["--dataset", "d", "--epsilon", "1", "--delta", "1e-5", "--topics", "2"]
    cli = from_arguments(build_parser().parse_args(["release", *required]))
    dep = from_arguments(release_parser("x", "0 0 * * *", "n").parse_args(required))
    spec = RunSpec(run_id="r", workspace="w", dataset="d", epsilon=1.0, delta=1e-5, topics=2)
    for name, field in ReleaseRequest.model_fields.items():
        if field.is_required():
            continue
        default = field.get_default(call_default_factory=True)
        assert getattr(cli, name) == default, name
        assert getattr(dep, name) == default, name
        if hasattr(spec, name) and name not in ("workspace", "batches"):
            assert getattr(spec, name) == default, name
    # a spec's batches are the resolved batch numbers; the request's are kept as asked
    assert spec.requested_batches == ReleaseRequest.model_fields["batches"].get_default()
    assert (
        spec.bounds.max_docs_per_author
        == ReleaseRequest.model_fields["max_docs_per_author"].get_default()
    )


def test_help_shows_the_defaults(capsys):
    from fdptm.cli import main

    with pytest.raises(SystemExit):
        main(["release", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "(default 100)" in out
        and "(default 0.5)" in out
        and f"(default {DEFAULT_MECHANISM})" in out
    )


def test_resume_refuses_any_release_option_even_at_its_default(tmp_path, capsys):
    from fdptm.cli import main

    ws = ["--workspace", str(tmp_path)]
    assert main(["release", "--resume", "r-1", "--iterations", "100", *ws]) == 2
    assert "drop --iterations" in capsys.readouterr().err


@pytest.mark.parametrize(("field", "value"), [("epsilon", True), ("topics", True)])
def test_booleans_are_not_numbers(field, value):
    from fdptm.errors import BadInputError

    fields = {"dataset": "d", "epsilon": 1.0, "delta": 1e-5, "topics": 2, field: value}
    with pytest.raises(BadInputError, match=f"--{field}: .*not true/false"):
        ReleaseRequest.build(**fields)
    with pytest.raises(BadInputError, match="--baseline"):
        ReleaseRequest.build(**{**fields, field: 1, "baseline": "yes"})
