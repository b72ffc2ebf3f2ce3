"""ChaCha20 keystream words: the random bits of every exact sampler fdptm runs itself.

OpenSSL's ChaCha20 (through ``cryptography``) keyed with 256 bits of ``os.urandom``, about
4 GB/s on one core: the local randomiser's flips (``fdptm.local``) and the exact discrete
Laplace and Gaussian noise (``fdptm.privacy.exact``) read it as uint64 words. Noise must be
unpredictable, or whoever predicts it subtracts it. ``KeyStream(seed=...)`` exists for
tests only: its output is reproducible, so nothing drawn from it is private.
"""

from __future__ import annotations

import hashlib
import os
from functools import cache

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

KEYSTREAM_WORDS = 1 << 21
"""64-bit keystream words drawn at a time at most (16 MiB)."""
REKEY_BYTES = 1 << 36
"""A fresh key from ``os.urandom`` after this much keystream (far below any ChaCha20
counter limit, whichever OpenSSL-compatible library serves it)."""


@cache
def _zeros() -> bytes:
    """The plaintext every stream encrypts (shared: 16 MiB once per process)."""
    return bytes(8 * KEYSTREAM_WORDS)


class KeyStream:
    """ChaCha20 keystream words; keyed from ``os.urandom`` unless a (test-only) seed is given.

    ``label`` separates the seeded streams of different users of one seed (a test's local
    reports and its noise never share bits)."""

    def __init__(self, seed: int | None = None, label: str = "local") -> None:
        self.seeded = seed is not None
        self._seed = seed
        self._label = label
        self._key(0)

    def _key(self, generation: int) -> None:
        if self._seed is None:
            key = os.urandom(32)
        else:
            text = f"fdptm {self._label} test seed {int(self._seed)} {generation}".encode()
            key = hashlib.sha256(text).digest()
        self._cipher = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()
        self._generation, self._used, self._pid = generation, 0, os.getpid()

    def fill(self, out: np.ndarray) -> np.ndarray:
        """Fill a C-contiguous uint64 array of at most KEYSTREAM_WORDS words with keystream.

        A forked child never continues its parent's stream (it would repeat the parent's
        draws): it is refused. The key is renewed every ``REKEY_BYTES``."""
        if os.getpid() != self._pid:
            raise RuntimeError("a KeyStream cannot be used across fork(); make a new one")
        view = memoryview(out).cast("B")
        if self._used + len(view) > REKEY_BYTES:
            self._key(self._generation + 1)
        self._cipher.update_into(memoryview(_zeros())[: len(view)], view)
        self._used += len(view)
        return out
