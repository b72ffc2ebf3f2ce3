"""Randomised response's flipping parameter f, realised exactly (LP-LDA, section V-A).

Each bit of a document's binary vector is kept with probability 1 - f and replaced by a
fair coin with probability f, so an output bit differs from the input bit with probability
f/2. Equivalently the report is the vector XOR a mask of independent Bernoulli(f/2) bits,
which is how ``fdptm.local.randomizer`` draws it.

The device draws Bernoulli(f/2) exactly, not through a floating-point comparison: f/2 is
rounded once to a multiple of 2^-24 (``Flip.numerator`` / 2^24), and every mask bit is
``U < numerator`` for a uniform 24-bit integer U, compared bit by bit (the exact sampler of
``fdptm.local.randomizer``). The guarantee is computed from that realised probability, so
the epsilon stated is the one the device implements.

Theorem 4: with q = f/2, the report is log((1 - q) / q)-LDP for each word (each bit), and,
its V bits being perturbed independently, V log((1 - q) / q)-LDP for the whole document.
The per-document figure is the protection of a document; the per-word figure is only that
of one word's presence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_CEILING, Context, Decimal

from fdptm.errors import BadInputError

FLIP_BITS = 24
"""f/2 is realised as a multiple of 2^-FLIP_BITS."""
ONE = 1 << FLIP_BITS


_DIGITS = 60
"""Decimal digits of the exact-rounding computation of a word epsilon."""
_MARGIN = Decimal(1) + Decimal(10) ** -55
"""Covers Decimal ln's rounding (half an ulp at 60 digits) with room to spare."""


def _log_ratio_up(numerator: int, denominator: int) -> float:
    """The smallest float >= log(numerator / denominator), for integers 0 < d < n.

    A float quotient and ``math.log`` each round (and libm's log is not correctly rounded):
    for a ratio near 1 the log is tiny and the quotient's rounding alone moved it by a
    relative 1e-11 (issue 29's review). Here the quotient is rounded up in 60-digit decimal
    arithmetic, Decimal's ``ln`` is correctly rounded (to half an ulp of 60 digits), the
    result is raised by a relative 1e-55 to cover that, and the float is the first one at or
    above it (compared exactly)."""
    up = Context(prec=_DIGITS, rounding=ROUND_CEILING)
    ratio = up.divide(Decimal(numerator), Decimal(denominator))
    bound = up.multiply(ratio.ln(Context(prec=_DIGITS)), _MARGIN)
    value = float(bound)
    return value if Decimal(value) >= bound else math.nextafter(value, math.inf)


@dataclass(frozen=True)
class Flip:
    """f, as the exact probability numerator / 2^24 that an output bit differs from the input."""

    numerator: int

    def __post_init__(self) -> None:
        if not 1 <= self.numerator < ONE // 2:
            raise BadInputError(
                f"the flip probability f/2 = {self.numerator}/2^{FLIP_BITS} must lie in "
                "(0, 1/2): f in (0, 1)"
            )

    @classmethod
    def from_f(cls, f: float) -> Flip:
        """f in (0, 1), rounded to the nearest realisable value (f/2 on a 2^-24 grid)."""
        if not isinstance(f, int | float) or isinstance(f, bool) or not 0.0 < f < 1.0:
            raise BadInputError(
                f"--flip must be a number in (0, 1), got {f!r}: f = 0 would send the document "
                "itself, and f = 1 pure noise (eq. 8 divides by 1 - f)"
            )
        return cls(min(max(round(f / 2 * ONE), 1), ONE // 2 - 1))

    @classmethod
    def from_word_epsilon(cls, epsilon: float) -> Flip:
        """The f whose per-word epsilon log((1 - f/2)/(f/2)) is ``epsilon`` (before rounding)."""
        if not 0.0 < epsilon < math.inf:
            raise BadInputError(f"a per-word epsilon must be positive and finite, got {epsilon}")
        return cls.from_f(2.0 / (1.0 + math.exp(epsilon)))

    @property
    def half(self) -> float:
        """q = f/2: the probability that a report bit differs from the document's bit."""
        return self.numerator / ONE

    @property
    def f(self) -> float:
        """f itself (exact in float64)."""
        return 2 * self.numerator / ONE

    @property
    def word_epsilon(self) -> float:
        """Theorem 4's per-word LDP epsilon, log((1 - f/2) / (f/2)), of the realised f,
        rounded up: never below the exact value (``_log_ratio_up``)."""
        return _log_ratio_up(ONE - self.numerator, self.numerator)

    def document_epsilon(self, n_words: int) -> float:
        """Theorem 4's per-document LDP epsilon over a vocabulary of ``n_words`` words
        (rounded up, as ``word_epsilon``)."""
        return math.nextafter(n_words * self.word_epsilon, math.inf)

    def to_dict(self, n_words: int) -> dict:
        """The guarantee of one report, per-document first (the manifest's order). A word's
        presence is one bit (``word_epsilon``); replacing one token by another changes up
        to two bits (``token_replacement_epsilon``, the ``word`` adjacency's unit)."""
        return {
            "document_epsilon": self.document_epsilon(n_words),
            "word_epsilon": self.word_epsilon,
            "token_replacement_epsilon": math.nextafter(2 * self.word_epsilon, math.inf),
            "flip": self.f,
            "flip_numerator": self.numerator,
            "flip_denominator": ONE // 2,
            "vocabulary_size": n_words,
        }
