"""Validation of the public parameters of mechanisms, shared so that every mechanism refuses
the same bad values with the same words (BadInputError: exit code 2, nothing spent).

Booleans are refused where numbers are expected (``True`` is an ``int`` in Python, and
``iterations=true`` must not quietly mean one iteration).
"""

from __future__ import annotations

import math

import numpy as np

from fdptm.errors import BadInputError


def is_real(value: object) -> bool:
    """A finite int or float that is not a bool."""
    return (
        isinstance(value, int | float | np.floating | np.integer)
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


def check_count(value: object, what: str, low: int = 1) -> int:
    """An integer >= ``low``."""
    if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < low:
        raise BadInputError(f"{what} must be an integer >= {low}, got {value!r}")
    return int(value)


def check_positive(value: object, what: str) -> float:
    """A finite number > 0."""
    if not is_real(value) or not value > 0:
        raise BadInputError(f"{what} must be a finite number > 0, got {value!r}")
    return float(value)


def check_fraction(value: object, what: str) -> float:
    """A number strictly between 0 and 1."""
    if not is_real(value) or not 0 < value < 1:
        raise BadInputError(f"{what} must be a number strictly between 0 and 1, got {value!r}")
    return float(value)


def check_choice(value: object, what: str, choices: tuple[str, ...]) -> str:
    """One of ``choices``."""
    if value not in choices:
        raise BadInputError(f"unknown {what} {value!r}; choose one of {choices}")
    return value
