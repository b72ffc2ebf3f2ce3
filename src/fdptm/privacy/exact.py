"""Exact discrete Laplace and discrete Gaussian noise on the integers, at compiled speed.

What it samples (Canonne, Kamath and Steinke, The Discrete Gaussian for Differential
Privacy, NeurIPS 2020; "CKS" below): the discrete Laplace of scale b, P(Y = y) proportional
to exp(-|y| / b) (CKS Definition 28), and the discrete Gaussian of scale sigma,
P(Y = y) proportional to exp(-y^2 / (2 sigma^2)) (CKS Definition 1), for the exact rational
value of the float scale given, exactly as OpenDP's ``make_laplace``/``make_gaussian`` on
integers define them. The privacy of the mechanisms that add this noise is that of those
distributions (CKS Theorem 14 for the Gaussian's rho = Delta^2 / (2 sigma^2) zCDP; the
discrete Laplace is Delta / b-DP); nothing here changes it, provided the draws have exactly
these distributions and are unpredictable.

How (proof sketch of exactness). CKS Algorithms 2 and 3 turn uniform integers, fair bits
and Bernoulli(exp(-x)) coins into exact draws (CKS Propositions 30 and 31, rejection
sampling, with rational scale t/s and sigma^2). Algorithm 1 realises the coins by a series
of Bernoulli(x/k) coins; here every coin is instead [W < exp(-x)] for a uniform W in [0,1)
that is an infinite sequence of fair bits, which is Bernoulli(exp(-x)) exactly whatever
procedure decides the comparison, provided it decides it correctly. The compiled kernel
(``fdptm.kernels.exact_noise``) reads W's first 53 bits and decides when the interval
those bits leave for W lies outside a floating-point bracket proven to contain exp(-x)
(the error analysis is in the kernel's docstrings; it rests on the platform exp being
accurate to one ulp, which ``tests/test_exact_noise.py`` checks against exact rational
bounds). Otherwise it stops the draw and exact code here reads further bits of W and compares
them with exp(-x) bracketed by the alternating Taylor series, rounded outwards on a dyadic
grid (``_exp_bracket``), which ends with probability 1 because exp(-x) is irrational for
rational x > 0; the rest of the draw continues in exact rational arithmetic with CKS's own
Algorithm 1. A draw that runs out of keystream or would overflow int64 stops at the
stage where it is and continues the same way. Every keystream word is read by one draw
only, and whether a buffer is refilled depends only on words already used, so the draws
are independent and each has exactly the target distribution. The reference samplers
``laplace_from(..., START)`` and ``gaussian_from(..., START)`` are the same algorithms
entirely in exact arithmetic; the tests compare both, and OpenDP's, with the exact pmf.

Randomness: ChaCha20 keystream (``fdptm.privacy.keystream``; OpenSSL, keyed with 256 bits
of ``os.urandom``), one independent key per block of ``BLOCK`` draws, so blocks run on any
number of threads (``fdptm.parallel.each_chunk``) and the draws never depend on the thread
count (for a seeded test stream, the block's draws are fixed by the seed and the block
alone).

Timing. A rejection sampler's running time depends on its random bits: a draw's time
grows with |Y| (the geometric loop) and with its rejections, and the slow exact
continuation runs for about one coin in 10^11. It never depends on the data, which never
enters a draw. A vector's time is the sum over all its draws, so what it says about any one
draw is a small fraction of one draw's variation. A release's timings are not part of its
public output (the manifest carries none); the operator sees them summed over thousands of
draws (the CLI's stage times, Prefect's task durations). Someone who can time single draws
inside the release process (a co-tenant with a cycle counter) could learn about |noise| of
individual entries, as with OpenDP's rejection samplers; do not run releases on hosts
shared with untrusted code.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from fdptm.kernels import exact_noise as kernel
from fdptm.parallel import each_chunk
from fdptm.privacy.keystream import KEYSTREAM_WORDS, KeyStream

__all__ = ["KeyStream", "discrete_gaussian", "discrete_laplace", "draw"]

MARGIN = 2.0**-40
"""Relative half-width of the kernel's bracket around exp(-x), per unit of (1 + x); at
least 500 times the floating-point error it covers (``kernel.bernoulli_exp``)."""
BLOCK = 1 << 16
"""Draws per independent keystream (and per task for the threads)."""
WORDS_PER_DRAW = {"laplace": 7.0, "gaussian": 11.0}
"""Keystream words read per draw, a little above the mean measured on scales 1 to 4e6
(how much keystream a buffer holds; any value is correct, since a draw that runs out
continues from a fresh buffer)."""
LIMIT = kernel.LIMIT
MAX_SCALE = 1 << 56
"""Largest scale: a draw beyond LIMIT = 2^62 (int64 arithmetic) has probability < exp(-64)."""
LOWEST = {"laplace": Fraction(1, 1 << 20), "gaussian": Fraction(1, 1 << 20)}
"""Smallest scales taken (below them the noise is 0 with probability 1 - 2e-12 or more,
which no mechanism asks for)."""


class Bits:
    """Keystream words for the exact continuation, read one at a time from ``stream``."""

    def __init__(self, stream: KeyStream) -> None:
        self._stream = stream
        self._buffer = np.empty(256, dtype=np.uint64)
        self._next = self._buffer.size

    def word(self) -> int:
        """The next 64 keystream bits as an int."""
        if self._next == self._buffer.size:
            self._stream.fill(self._buffer)
            self._next = 0
        self._next += 1
        return int(self._buffer[self._next - 1])

    def below(self, n: int) -> int:
        """A uniform integer in [0, n), by rejection from n - 1's bit length."""
        bits = (n - 1).bit_length()
        while True:
            value = 0
            for _ in range((bits + 63) // 64):
                value = (value << 64) | self.word()
            value >>= (-bits) % 64
            if value < n:
                return value

    def bernoulli(self, q: Fraction) -> bool:
        """Bernoulli(q) for a rational q in [0, 1], exactly."""
        return self.below(q.denominator) < q.numerator


def bernoulli_exp(bits: Bits, x: Fraction) -> bool:
    """Bernoulli(exp(-x)) for a rational x >= 0: CKS Algorithm 1, exactly.

    For x <= 1, the first K with Bernoulli(x / K) = 0 is odd with probability exp(-x); for
    x > 1, exp(-x) = exp(-1)^floor(x) exp(-(x - floor(x))) as independent coins.
    """
    while x > 1:
        if not bernoulli_exp(bits, Fraction(1)):
            return False
        x -= 1
    k = 1
    while bits.bernoulli(x / k):
        k += 1
    return k % 2 == 1


LOG2E_BELOW = Fraction(14426950408, 10**10)
"""A rational below log2(e) = 1.44269504088896...: exp(-x) <= 2^-floor(x LOG2E_BELOW)."""


def _series(f: Fraction, bits: int) -> tuple[int, int]:
    """Integers lo, hi with lo / 2^bits <= exp(-f) <= hi / 2^bits for a rational f in [0, 1].

    The Taylor series of exp(-f) alternates with terms decreasing in size, so the value
    lies between any two consecutive partial sums; the sum stops once a term is below
    2^-(bits + 2), and the two sums are rounded outwards to the grid 2^-bits."""
    total, term, k = Fraction(0), Fraction(1), 1
    while True:
        total += term
        term = term * -f / k
        k += 1
        if abs(term) < Fraction(1, 1 << (bits + 2)):
            break
    low, high = sorted((total, total + term))
    return math.floor(low * (1 << bits)), math.ceil(high * (1 << bits))


def _power(lo: int, hi: int, n: int, bits: int) -> tuple[int, int]:
    """Bounds on v^n for lo / 2^bits <= v <= hi / 2^bits, 0 <= v, by binary powering with
    every product rounded outwards to the grid 2^-bits (lo down, hi up)."""
    one = 1 << bits
    result_lo, result_hi = one, one
    while n:
        if n & 1:
            result_lo = (result_lo * lo) >> bits
            result_hi = -((-result_hi * hi) >> bits)
        n >>= 1
        if n:
            lo, hi = (lo * lo) >> bits, -((-hi * hi) >> bits)
    return result_lo, result_hi


def _exp_bracket(x: Fraction, bits: int) -> tuple[Fraction, Fraction]:
    """Rationals lo <= exp(-x) <= hi for a rational x >= 0, within a few times
    (1 + log2(x)) 2^-bits: exp(-x) = exp(-1)^floor(x) exp(-(x - floor(x)))."""
    whole = math.floor(x)
    work = bits + 2 * max(whole, 1).bit_length() + 8
    lo, hi = _series(x - whole, work)
    if whole:
        one_lo, one_hi = _power(*_series(Fraction(1), work), whole, work)
        lo, hi = (lo * one_lo) >> work, -((-hi * one_hi) >> work)
    return Fraction(max(lo, 0), 1 << work), Fraction(hi, 1 << work)


def bernoulli_exp_given(bits: Bits, head: int, x: Fraction) -> bool:
    """[W < exp(-x)] for the uniform W whose first 53 bits are ``head`` (the kernel could not
    tell), reading W's further bits 64 at a time until W's interval lies on one side of
    exp(-x): first against the cheap bound exp(-x) <= 2^-k, k = floor(x LOG2E_BELOW), then
    against ``_exp_bracket`` at 64 bits beyond W's. Both are exact comparisons of
    rationals, so the coin is Bernoulli(exp(-x)) exactly; it ends with probability 1
    (exp(-x) is irrational for rational x > 0, and W = exp(-x) has probability 0)."""
    numerator, exponent = head, 53
    k = math.floor(x * LOG2E_BELOW)
    while True:
        if numerator.bit_length() > exponent - k:  # W >= 2^-k >= exp(-x)
            return False
        lo, hi = _exp_bracket(x, exponent + 64)
        low = Fraction(numerator, 1 << exponent)
        if low + Fraction(1, 1 << exponent) <= lo:
            return True
        if low >= hi:
            return False
        numerator, exponent = (numerator << 64) | bits.word(), exponent + 64


def _coin(bits: Bits, x: Fraction, head: int) -> bool:
    return bernoulli_exp(bits, x) if head == kernel.NO_WORD else bernoulli_exp_given(bits, head, x)


def laplace_from(
    bits: Bits, t: int, s: int, stage: int, u: int = 0, v: int = 0, head: int = kernel.NO_WORD
) -> int:
    """Finish CKS Algorithm 2 (discrete Laplace of scale t/s) from ``stage`` with state (u, v)
    and the undecided coin's head; from START it is the whole algorithm, exactly."""
    while True:
        if stage == kernel.START:
            u, head, stage = bits.below(t), kernel.NO_WORD, kernel.STAGE_D
        if stage == kernel.STAGE_D:
            accepted = _coin(bits, Fraction(u, t), head)
            head = kernel.NO_WORD
            if not accepted:
                stage = kernel.START
                continue
            v, stage = 0, kernel.STAGE_GEO
        if stage == kernel.STAGE_GEO:
            while _coin(bits, Fraction(1), head):
                head = kernel.NO_WORD
                v += 1
            head, stage = kernel.NO_WORD, kernel.STAGE_SIGN
        y = (u + t * v) // s
        negative = bits.word() >> 63
        if negative and y == 0:
            stage = kernel.START
            continue
        return -y if negative else y


def gaussian_from(
    bits: Bits,
    sigma: Fraction,
    stage: int,
    u: int = 0,
    v: int = 0,
    y: int = 0,
    head: int = kernel.NO_WORD,
) -> int:
    """Finish CKS Algorithm 3 (discrete Gaussian of scale sigma) from ``stage``; from START it
    is the whole algorithm, exactly."""
    t = math.floor(sigma) + 1
    sigma2 = sigma * sigma
    while True:
        if stage != kernel.STAGE_C:
            y = laplace_from(bits, t, 1, stage, u, v, head)
            head = kernel.NO_WORD
        if _coin(bits, (abs(y) - sigma2 / t) ** 2 / (2 * sigma2), head):
            return y
        stage, head = kernel.START, kernel.NO_WORD


def supports(kind: str, scale: Fraction) -> bool:
    """Whether the kernel takes ``scale``: at most 2^56 (a draw passes 2^62 with probability
    below exp(-64)), at least LOWEST[kind], and (Laplace: CKS's t / s) numerator and
    denominator below 2^62, so that every integer of the algorithm is exact in int64."""
    if not LOWEST[kind] <= scale <= MAX_SCALE:
        return False
    return kind == "gaussian" or (scale.numerator < LIMIT and scale.denominator < LIMIT)


def _block(
    kind: str,
    out: np.ndarray,
    stream: KeyStream,
    scale: Fraction,
    margin: float,
    buffer: int = KEYSTREAM_WORDS,
    reserve: int = kernel.RESERVE,
) -> int:
    """Fill ``out`` with draws from one keystream: the kernel, then exact rationals for the
    draws it stopped; returns how many it stopped. ``buffer`` caps the words per kernel
    call and ``reserve`` is the kernel's (tests make both tiny so that draws run out)."""
    stops = np.empty((out.size, 6), dtype=np.int64)
    n_stops = 0
    done = 0
    while done < out.size:
        want = int(WORDS_PER_DRAW[kind] * (out.size - done)) + 2 * kernel.RESERVE
        words = stream.fill(np.empty(min(want, buffer), dtype=np.uint64))
        if kind == "laplace":
            t, s = np.int64(scale.numerator), np.int64(scale.denominator)
            done, n_stops = kernel.laplace_block(
                out, done, words, t, s, margin, reserve, stops, n_stops
            )
        else:
            sigma2 = float(scale * scale)
            t = np.int64(math.floor(scale) + 1)
            done, n_stops = kernel.gaussian_block(
                out, done, words, t, sigma2, margin, reserve, stops, n_stops
            )
    bits = Bits(stream)
    for index, stage, u, v, y, head in stops[:n_stops].tolist():
        if kind == "laplace":
            value = laplace_from(bits, scale.numerator, scale.denominator, stage, u, v, head)
        else:
            value = gaussian_from(bits, scale, stage, u, v, y, head)
        if abs(value) >= LIMIT:
            raise OverflowError("a draw beyond 2^62; the scale is far too large for int64")
        out[index] = value
    return n_stops


def draw(
    kind: str,
    scale: Fraction,
    size: int,
    seed: int | None = None,
    margin: float = MARGIN,
    buffer: int = KEYSTREAM_WORDS,
    reserve: int = kernel.RESERVE,
) -> tuple[np.ndarray, int]:
    """``size`` draws of ``kind`` ("laplace" or "gaussian") at ``scale`` and how many the
    kernel handed to exact rationals. ``margin``, ``buffer`` and ``reserve`` are for tests of
    the exact continuation (a wider bracket, tiny keystream buffers)."""
    if buffer <= reserve:
        raise ValueError(f"a buffer of {buffer} words never starts a draw (reserve {reserve})")
    if not supports(kind, scale):
        raise ValueError(
            f"the exact {kind} sampler takes scales in [{float(LOWEST[kind])}, 2^56] with "
            f"numerator and denominator below 2^62, got {float(scale)}"
        )
    out = np.empty(size, dtype=np.int64)
    starts = range(0, size, BLOCK)
    stopped = [0] * len(starts)

    def run(c: int) -> None:
        stream = KeyStream(seed, label=f"noise {kind} {starts[c]}")
        part = out[starts[c] : starts[c] + BLOCK]
        stopped[c] = _block(kind, part, stream, scale, max(margin, MARGIN), buffer, reserve)

    each_chunk(run, len(starts))
    return out, sum(stopped)


def discrete_laplace(
    scale: float | Fraction, size: int, seed: int | None = None, margin: float = MARGIN
) -> np.ndarray:
    """``size`` i.i.d. discrete Laplace draws of scale ``scale`` (its exact rational value;
    P(y) proportional to exp(-|y| / scale)) as int64. ``seed`` is for tests only."""
    return draw("laplace", Fraction(scale), size, seed, margin)[0]


def discrete_gaussian(
    scale: float | Fraction, size: int, seed: int | None = None, margin: float = MARGIN
) -> np.ndarray:
    """``size`` i.i.d. discrete Gaussian draws of scale ``scale`` (its exact rational value;
    P(y) proportional to exp(-y^2 / (2 scale^2))) as int64. ``seed`` is for tests only."""
    return draw("gaussian", Fraction(scale), size, seed, margin)[0]
