"""Declared constraints on the public parameters of mechanisms.

Each mechanism states once, next to its ``params`` function, what every keyword parameter
accepts (scikit-learn's ``_parameter_constraints`` is the model): a mapping from the
parameter's name to a ``Param`` (one or more constraints, any of which may hold, a phrase
saying what the parameter is, and a hint for fixing a bad value). ``validate_params``
checks the mapping against the function's signature when the module is imported (every
keyword parameter declared, nothing declared that the function lacks) and checks every
value before the body runs, so a bad option is refused with the same words by every
mechanism (``BadInputError``: exit code 2, before any private data is read and before
anything is spent). Rules that tie several parameters together (``clip=private`` needs
the RDP accountant, spectral's configurations 3-4 need ``claimed_unproven``) stay in the
body, as in scikit-learn. The declarations also describe each option in ``fdptm
mechanisms``.

Booleans are refused where numbers are expected (``True`` is an ``int`` in Python, and
``iterations=true`` must not quietly mean one iteration).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

import numpy as np

from fdptm.errors import BadInputError
from fdptm.privacy.adjacency import Adjacency

F = TypeVar("F", bound=Callable[..., Any])


def is_real(value: object) -> bool:
    """A finite int or float that is not a bool."""
    return (
        isinstance(value, int | float | np.floating | np.integer)
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


class Constraint(Protocol):
    """One set of values a parameter may take."""

    def accepts(self, value: object) -> bool: ...

    def describe(self) -> str: ...

    def convert(self, value: Any) -> Any: ...


@dataclass(frozen=True)
class Integer:
    """An integer >= ``low`` (not a bool)."""

    low: int = 1

    def accepts(self, value: object) -> bool:
        return (
            isinstance(value, int | np.integer)
            and not isinstance(value, bool)
            and value >= self.low
        )

    def describe(self) -> str:
        return f"an integer >= {self.low}"

    def convert(self, value: Any) -> int:
        return int(value)


@dataclass(frozen=True)
class Real:
    """A finite number in the interval from ``low`` to ``high`` (None: unbounded), whose
    ends ``closed`` says are included."""

    low: float | None = None
    high: float | None = None
    closed: Literal["neither", "left", "right", "both"] = "neither"

    def accepts(self, value: object) -> bool:
        if not is_real(value):
            return False
        left = self.closed in ("left", "both")
        right = self.closed in ("right", "both")
        if self.low is not None and not (value >= self.low if left else value > self.low):
            return False
        return self.high is None or (value <= self.high if right else value < self.high)

    def describe(self) -> str:
        left = self.closed in ("left", "both")
        right = self.closed in ("right", "both")
        if self.high is None:
            if self.low is None:
                return "a finite number"
            return f"a finite number {'>=' if left else '>'} {self.low:g}"
        if self.low is None:
            return f"a number {'<=' if right else '<'} {self.high:g}"
        if not left and not right:
            return f"a number strictly between {self.low:g} and {self.high:g}"
        return (
            f"a number in {'[' if left else '('}{self.low:g}, {self.high:g}{']' if right else ')'}"
        )

    def convert(self, value: Any) -> float:
        return float(value)


POSITIVE = Real(0.0)
NON_NEGATIVE = Real(0.0, closed="left")
OPEN_FRACTION = Real(0.0, 1.0)


@dataclass(frozen=True)
class OneOf:
    """One of ``choices`` (compared by value and type: ``True`` is not ``1``)."""

    choices: tuple[Any, ...]

    def accepts(self, value: object) -> bool:
        return any(value == c and type(value) is type(c) for c in self.choices)

    def describe(self) -> str:
        return "one of " + ", ".join(repr(c) for c in self.choices)

    def convert(self, value: Any) -> Any:
        return value


@dataclass(frozen=True)
class Boolean:
    """``True`` or ``False``."""

    def accepts(self, value: object) -> bool:
        return isinstance(value, bool)

    def describe(self) -> str:
        return "true or false"

    def convert(self, value: Any) -> bool:
        return value


@dataclass(frozen=True)
class DatasetUnit:
    """A dataset unit (``Adjacency``) among ``choices``: the units a guarantee is stated for."""

    choices: tuple[Adjacency, ...]

    def accepts(self, value: object) -> bool:
        return isinstance(value, Adjacency) and value in self.choices

    def describe(self) -> str:
        return "a dataset unit among " + ", ".join(a.value for a in self.choices)

    def convert(self, value: Any) -> Adjacency:
        return value


@dataclass(frozen=True)
class ListOf:
    """Distinct values, comma-separated in a string (``"50,100"``) or one value; each item is
    parsed as an integer, else a number, else kept as text, and must meet one of ``items``."""

    items: tuple[Constraint, ...]

    def parse(self, value: object) -> list[Any] | None:
        """The items converted, or None when any is refused or two are equal."""
        if isinstance(value, bool):
            return None
        parts = [p.strip() for p in value.split(",")] if isinstance(value, str) else [value]
        out = []
        for part in parts:
            item = next(
                (c.convert(v) for v in _readings(part) for c in self.items if c.accepts(v)), None
            )
            if item is None:
                return None
            out.append(item)
        return out if out and len(set(out)) == len(out) else None

    def accepts(self, value: object) -> bool:
        return self.parse(value) is not None

    def describe(self) -> str:
        return "a comma-separated list of distinct values, each " + " or ".join(
            c.describe() for c in self.items
        )

    def convert(self, value: Any) -> list[Any]:
        return self.parse(value)  # type: ignore[return-value]


def _readings(part: object) -> list[object]:
    """``part`` as an int, a float and itself, in that order, where it can be read so."""
    if not isinstance(part, str):
        return [part]
    readings: list[object] = []
    for cast in (int, float):
        with contextlib.suppress(ValueError):
            readings.append(cast(part))
    return [*readings, part]


@dataclass(frozen=True)
class Param:
    """What one parameter accepts (any of ``constraints``), what it is, how to fix it."""

    constraints: tuple[Constraint, ...]
    what: str = ""
    hint: str = ""

    def describe(self) -> str:
        return " or ".join(c.describe() for c in self.constraints)

    def check(self, name: str, value: Any) -> Any:
        """``value`` converted by the first constraint that accepts it; else BadInputError."""
        for constraint in self.constraints:
            if constraint.accepts(value):
                return constraint.convert(value)
        label = f"{name} ({self.what})" if self.what else name
        hint = f"; {self.hint}" if self.hint else ""
        raise BadInputError(f"{label} must be {self.describe()}, got {value!r}{hint}")


def param(*constraints: Constraint, what: str = "", hint: str = "") -> Param:
    """A ``Param`` accepting any of ``constraints``."""
    if not constraints:
        raise TypeError("a parameter needs at least one constraint")
    return Param(constraints, what, hint)


N_TOPICS = param(Integer(1), what="the number of topics")
ITERATIONS = param(Integer(1), what="iterations of M2")
MAX_DOCS_PER_AUTHOR = param(Integer(1), what="documents kept per author")
MAX_TOKENS_PER_DOC = param(Integer(1), what="tokens kept per document")


def validate_params(constraints: Mapping[str, Param]) -> Callable[[F], F]:
    """Decorate a ``params`` function so its arguments are checked against ``constraints``.

    Raises TypeError at import when a keyword-only parameter is undeclared or a declared
    name is not a parameter: the declaration is complete by construction. The body gets
    the converted values (``int`` for integers, ``float`` for reals).
    """

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)
        keyword = {
            n for n, p in signature.parameters.items() if p.kind == inspect.Parameter.KEYWORD_ONLY
        }
        if keyword - set(constraints) or set(constraints) - set(signature.parameters):
            raise TypeError(
                f"{fn.__qualname__}: undeclared {sorted(keyword - set(constraints))}, "
                f"unknown {sorted(set(constraints) - set(signature.parameters))}"
            )

        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            for name, declared in constraints.items():
                bound.arguments[name] = declared.check(name, bound.arguments[name])
            return fn(*bound.args, **bound.kwargs)

        checked.parameter_constraints = dict(constraints)  # type: ignore[attr-defined]
        return checked  # type: ignore[return-value]

    return decorate


def declared(fn: Callable[..., Any]) -> dict[str, Param]:
    """The constraints ``validate_params`` attached to ``fn`` (empty when it has none)."""
    return dict(getattr(fn, "parameter_constraints", {}))
