"""The attacks of an audit, what part of the release each one tests, and the verdict.

Two sets of models are trained on the same random halves (FDPTM paper, section 4.4):

* pipeline models run the audited configuration end to end (M1, SAN, M2), each with its
  own DP vocabulary, as the paper's set-up does. LiRA runs on three statistics of every
  document (``fdptm.audit.shadows.ModelScores``): the release-level likelihood and eq. 3's
  zeta test the whole release against its claim; the in-vocabulary token count is a
  function of M1's output alone (post-processing), so it tests M1 against M1's own claim.
  The Huang et al. baselines threshold the target's theta-hat globally.
* M2 models all use the audited release's own vocabulary S, which is public: M2 is DP for
  every fixed S (adaptive composition, Theorem 4.1), so LiRA on eq. 3's zeta across these
  models tests M2 alone against M2's own claim. With M1's randomness and protection taken
  out it is also the sharper test of M2: a sound M1 hides the rare words through which a
  broken M2 would leak most.

A bound above any claim fails the audit; the stages whose own test failed are the suspects.
When only the release-level test fails, the culprit is undetermined: basic composition is a
theorem, so one of the stages leaks in a way its own single attack missed, or the budgets
were added up wrongly.
A document a LiRA cannot judge (no shadow on a side it needs) is never flagged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fdptm.audit.bound import DocumentClaim
from fdptm.audit.lira import offline_scores, online_scores
from fdptm.audit.shadows import ModelScores

SCOPES = ("release", "M1", "M2")


@dataclass(frozen=True)
class Attack:
    """Membership scores of the target's documents, and the claim they test (a scope)."""

    scores: np.ndarray
    scope: str


def _lira(mode: str, masks: np.ndarray, models: list[ModelScores], statistic) -> np.ndarray:
    lira = online_scores if mode == "online" else offline_scores
    shadow = np.stack([statistic(m) for m in models[1:]])
    scores = lira(shadow, masks[1:], statistic(models[0]))
    return np.nan_to_num(scores, nan=-np.inf)


def attacks(
    mode: str,
    masks: np.ndarray,
    pipeline: list[ModelScores],
    m2_only: list[ModelScores],
    *,
    with_m1: bool = True,
) -> dict[str, Attack]:
    """Every attack on the target (model 0 of each set, trained on ``masks[0]``); without
    an M1 stage (a public vocabulary) there is no vocabulary attack, nothing to test."""
    name = f"lira-{mode}"
    theta = pipeline[0].in_vocabulary
    found = {
        name: Attack(_lira(mode, masks, pipeline, lambda m: m.release_zeta), "release"),
        f"{name}-eq3": Attack(
            _lira(mode, masks, pipeline, lambda m: m.in_vocabulary.zeta), "release"
        ),
        f"{name}-vocabulary": Attack(
            _lira(mode, masks, pipeline, lambda m: m.kept.astype(float)), "M1"
        ),
        "huang-max-posterior": Attack(theta.max_posterior_logit(), "release"),
        "huang-std": Attack(theta.std(), "release"),
        "huang-negative-entropy": Attack(theta.negative_entropy(), "release"),
        f"m2-{name}": Attack(_lira(mode, masks, m2_only, lambda m: m.in_vocabulary.zeta), "M2"),
    }
    if not with_m1:
        del found[f"{name}-vocabulary"]
    return found


def verdict(results: dict[str, dict], claims: dict[str, DocumentClaim]) -> dict:
    """Per scope, the largest bound against its claim; pass or fail; the suspect stages
    ("undetermined" when only the release-level test failed)."""
    bounds = {}
    for scope in (s for s in SCOPES if s in claims):
        found = max(
            r["epsilon_lower_bound"]["epsilon"] for r in results.values() if r["scope"] == scope
        )
        claim = claims[scope].epsilon
        bounds[scope] = {
            "claim": claim,
            "lower_bound": found,
            "exceeded": claim is not None and found > claim,
        }
    suspects = [s for s in ("M1", "M2") if s in bounds and bounds[s]["exceeded"]]
    if bounds["release"]["exceeded"] and not suspects:
        suspects = ["undetermined"]
    return {
        "bounds": bounds,
        "largest_lower_bound": max(b["lower_bound"] for b in bounds.values()),
        "verdict": "failed" if suspects else "passed",
        "suspects": suspects,
    }
