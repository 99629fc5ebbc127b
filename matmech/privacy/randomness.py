"""Random sources: uniform random words and integers from the OS CSPRNG or, for
reproducible experiments only, a numpy Generator.

``check_rng(None)`` makes a fresh source reading ``os.urandom`` (the only secure choice;
fresh per call, so forked processes never share buffered bytes); a
``numpy.random.Generator`` gives a reproducible source that is NOT cryptographically
secure; a :class:`RandomSource` is used as is (thread-safe, discards its buffer after a
fork). Every sampler of :mod:`matmech.privacy.noise` draws through one of these.
Uniform integers are exact: masking, Lemire's multiply-and-reject ("Fast random integer
generation in an interval", ACM TOMS 2019) or rejection of 64-bit words.
"""

from __future__ import annotations

import os
import threading

import numpy as np

__all__ = ["RandomSource", "check_rng"]

_TWO32 = 1 << 32
_INT64_MAX = (1 << 63) - 1
_CHUNK_WORDS = 1 << 13  # 64 KiB: the smallest read from the underlying generator


class RandomSource:
    """Uniform random integers drawn exactly from a stream of random 64-bit words.

    Made by :func:`check_rng`; do not construct directly. ``secure`` says whether the
    words come from the operating system's CSPRNG.
    """

    __slots__ = ("_buf", "_pos", "_pid", "_lock")
    secure = False

    def __init__(self) -> None:
        self._buf = np.empty(0, dtype=np.uint64)
        self._pos = 0
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def _generate(self, n: int) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    # raw words ---------------------------------------------------------------------
    def words64(self, n: int) -> np.ndarray:
        """``n`` independent uniform 64-bit words (a read-only uint64 array)."""
        if n >= _CHUNK_WORDS:
            return self._generate(n)
        with self._lock:  # two threads must never be handed the same buffered words
            pid = os.getpid()
            if self._pos + n > self._buf.size or pid != self._pid:  # nor two forked processes
                self._buf = self._generate(_CHUNK_WORDS)
                self._pos, self._pid = 0, pid
            out = self._buf[self._pos : self._pos + n]
            self._pos += n
        return out

    def words32(self, n: int) -> np.ndarray:
        """``n`` independent uniform 32-bit words (uint32 array)."""
        return self.words64((n + 1) // 2).view(np.uint32)[:n]

    def bits(self, n: int) -> np.ndarray:
        """``n`` independent fair bits as a bool array."""
        raw = self.words64((n + 63) // 64).view(np.uint8)
        return np.unpackbits(raw, count=n).view(bool)

    # uniform integers --------------------------------------------------------------
    def integers(self, d: int, n: int) -> np.ndarray:
        """``n`` uniform integers in ``[0, d)`` as int64, exactly, for ``1 <= d < 2**63``.

        Power-of-two ``d`` masks the word; ``d <= 2**32`` uses Lemire's multiply-and-reject
        method on 32-bit words ("Fast random integer generation in an interval", ACM TOMS
        2019); larger ``d`` rejects 64-bit words at or above the largest multiple of ``d``.
        """
        d = int(d)
        if not 1 <= d <= _INT64_MAX:
            raise ValueError(f"d must be an integer in [1, 2**63), got {d!r}")
        if d == 1:
            return np.zeros(n, dtype=np.int64)
        if d & (d - 1) == 0:
            if d <= _TWO32:
                return (self.words32(n) & np.uint32(d - 1)).astype(np.int64)
            return (self.words64(n) & np.uint64(d - 1)).view(np.int64)
        if d <= _TWO32:
            return self._lemire32(d, n)
        return self._modulo64(d, n)

    def _lemire32(self, d: int, n: int) -> np.ndarray:
        dd = np.uint64(d)
        threshold = np.uint32(_TWO32 % d)
        prod = self.words32(n).astype(np.uint64) * dd
        out = (prod >> np.uint64(32)).view(np.int64)
        bad = prod.astype(np.uint32) < threshold
        if bad.any():
            idx = np.flatnonzero(bad)
            out[idx] = self._lemire32(d, idx.size)
        return out

    def _modulo64(self, d: int, n: int) -> np.ndarray:
        limit = np.uint64(((1 << 64) // d) * d)
        w = self.words64(n)
        out = (w % np.uint64(d)).view(np.int64)
        bad = w >= limit
        if bad.any():
            idx = np.flatnonzero(bad)
            out[idx] = self._modulo64(d, idx.size)
        return out

    def randbelow(self, d: int) -> int:
        """One uniform Python int in ``[0, d)`` for any integer ``d >= 1`` (exact)."""
        d = int(d)
        if d < 1:
            raise ValueError(f"d must be a positive integer, got {d!r}")
        nbits = (d - 1).bit_length()
        if nbits == 0:
            return 0
        nwords = (nbits + 63) // 64
        while True:
            x = int.from_bytes(self.words64(nwords).tobytes(), "little")
            x >>= 64 * nwords - nbits
            if x < d:
                return x


#: What an ``rng`` argument may be (for annotations): None (the OS CSPRNG, secure), a numpy
#: Generator (reproducible, NOT secure) or a :class:`RandomSource`.
Rng = np.random.Generator | RandomSource | None


class _SecureSource(RandomSource):
    __slots__ = ()
    secure = True

    def _generate(self, n: int) -> np.ndarray:
        return np.frombuffer(os.urandom(8 * n), dtype=np.uint64)

    def __repr__(self) -> str:
        return "RandomSource(os.urandom, secure=True)"


#: Bit generators whose raw output is one full 64-bit word per step: for them
#: ``random_raw(n)`` is the same words as ``integers(0, 2**64, n, dtype=np.uint64)`` (and
#: leaves the same state), read about 2.5 times faster.
_RAW64 = (np.random.PCG64, np.random.PCG64DXSM, np.random.Philox, np.random.SFC64)


class _GeneratorSource(RandomSource):
    __slots__ = ("_rng", "_raw")

    def __init__(self, rng: np.random.Generator) -> None:
        super().__init__()
        self._rng = rng
        self._raw = type(rng.bit_generator) in _RAW64

    def _generate(self, n: int) -> np.ndarray:
        if self._raw:
            return self._rng.bit_generator.random_raw(n)
        return self._rng.integers(0, 1 << 64, size=n, dtype=np.uint64)

    def __repr__(self) -> str:
        return f"RandomSource({self._rng!r}, secure=False)"


def check_rng(rng=None) -> RandomSource:
    """Turn an ``rng`` argument into a :class:`RandomSource`.

    ``None`` -> a fresh source reading ``os.urandom`` (secure); a
    ``numpy.random.Generator`` -> a reproducible source that is NOT secure; a
    ``RandomSource`` -> itself. Anything else raises ``TypeError``.
    """
    if rng is None:
        return _SecureSource()
    if isinstance(rng, RandomSource):
        return rng
    if isinstance(rng, np.random.Generator):
        return _GeneratorSource(rng)
    raise TypeError(
        "rng must be None (secure OS randomness), a numpy.random.Generator "
        f"(reproducible, not secure) or a RandomSource, got {type(rng).__name__}: {rng!r}"
    )
