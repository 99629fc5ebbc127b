"""Random sources: uniform random words and integers from a secure generator or, for
reproducible experiments only, a numpy Generator.

``check_rng(None)`` makes a fresh secure source: AES-256 CTR_DRBG (NIST SP 800-90A Rev. 1,
section 10.2.1, without a derivation function) instantiated from 384 bits of ``os.urandom``.
It reads the keystream at numpy speed (several GB/s) where ``os.urandom`` gives a few
hundred MB/s; :func:`os_source` still reads ``os.urandom`` for every refill, for those who
want the operating system's generator only. Both are fresh per call, thread-safe and never
hand the same words to a forked child; no source can be copied, deep-copied or pickled (a
copy would repeat the original's words: TypeError). A ``numpy.random.Generator`` gives a reproducible
source that is NOT cryptographically secure; a :class:`RandomSource` is used as is. Every
sampler of :mod:`matmech.privacy.noise` draws through one of these.

Security of the default rests on AES-256 being a pseudorandom function (one key encrypts
at most 2**16 + 3 counter blocks, so the PRP/PRF switching term is below 2**-96) and
on ``os.urandom`` giving full-entropy seeds. As in CTR_DRBG, every request ends with the
Update step, so the key and counter that made earlier words are overwritten (backtracking
resistance, SP 800-90A section 8.8; best effort in Python: the words themselves stay in
memory until freed). Deviations from the standard: a request may be longer than 2**19 bits
(it is cut into pieces of 2**20 bytes, each followed by an Update), and the source reseeds
from ``os.urandom`` after ``_RESEED_BYTES`` (2**40) bytes and in every forked child.

Uniform integers are exact: masking, Lemire's multiply-and-reject ("Fast random integer
generation in an interval", ACM TOMS 2019) or rejection of 64-bit words.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import NoReturn

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes


_TWO32 = 1 << 32
_INT64_MAX = (1 << 63) - 1
_CHUNK_WORDS = 1 << 13  # 64 KiB: the smallest read from the underlying generator
_NO_COPY = (
    "a RandomSource cannot be {how}: the copy would hand out the same random words (the same "
    "noise) as the original; give each stream or release its own source (rng=None makes a "
    "fresh secure one)"
)


class RandomSource:
    """Uniform random integers drawn exactly from a stream of random 64-bit words.

    Made by :func:`check_rng` or :func:`os_source`; do not construct directly. ``secure``
    says whether the words come from a cryptographically secure generator.
    """

    __slots__ = ("_buf", "_pos", "_pid", "_lock", "__weakref__")
    secure = False

    def __init__(self) -> None:
        self._buf = np.empty(0, dtype=np.uint64)
        self._pos = 0
        self._pid = os.getpid()
        self._lock = threading.Lock()
        _LIVE.add(self)

    def _after_fork(self) -> None:
        """In a forked child: drop the buffered words, and a lock another thread held."""
        self._pid = -1
        self._lock = threading.Lock()

    def _generate(self, n: int) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    # never two holders of one state ---------------------------------------------------
    def __copy__(self) -> NoReturn:
        raise TypeError(_NO_COPY.format(how="copied"))

    def __deepcopy__(self, memo) -> NoReturn:
        raise TypeError(_NO_COPY.format(how="copied"))

    def __reduce_ex__(self, protocol) -> NoReturn:
        raise TypeError(_NO_COPY.format(how="pickled"))

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


#: What an ``rng`` argument may be (for annotations): None (the secure default), a numpy
#: Generator (reproducible, NOT secure) or a :class:`RandomSource`.
Rng = np.random.Generator | RandomSource | None

#: Every live source, so that a forked child can drop what its parent's sources hold even
#: when the child's pid equals a pid a source saw before (os.register_at_fork).
_LIVE: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for src in list(_LIVE):
        src._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _OsSource(RandomSource):
    __slots__ = ()
    secure = True

    def _generate(self, n: int) -> np.ndarray:
        return np.frombuffer(os.urandom(8 * n), dtype=np.uint64)

    def __repr__(self) -> str:
        return "RandomSource(os.urandom, secure=True)"


_SEED_BYTES = 48  # seedlen of AES-256 CTR_DRBG: a 256-bit Key and a 128-bit counter V
_PIECE_BYTES = 1 << 20  # most keystream under one Key before the Update: 2**16 AES blocks
_RESEED_BYTES = 1 << 40  # most output between two seeds from os.urandom
_SLACK = 16  # cryptography 3.1-42 wants 15 spare bytes after every update_into output
_ZEROS = memoryview(bytes(_PIECE_BYTES))
_M128 = (1 << 128) - 1


def _entropy() -> bytes:
    """384 fresh bits from the operating system: every (re)seed of the CTR_DRBG."""
    return os.urandom(_SEED_BYTES)


class _CtrDrbgSource(RandomSource):
    """AES-256 CTR_DRBG without a derivation function (SP 800-90A Rev. 1, 10.2.1).

    The state is Key || V. A request of b blocks is the AES-CTR keystream under Key from
    the counter block V + 1 (the Generate step), and the next 3 blocks become the new
    Key || V (the Update step with no additional input); a reseed XORs 48 fresh bytes of
    ``os.urandom`` into those 3 blocks instead (Update(entropy), which from Key = V = 0 is
    the Instantiate step, run by the first request). ``_entropy_input`` (a 48-byte seed)
    and ``_key_v`` (Key and V) are for known-answer tests only.
    """

    __slots__ = ("_state", "_since", "_seed_pid", "_state_lock")
    secure = True

    def __init__(
        self, *, _entropy_input: bytes | None = None, _key_v: tuple[bytes, bytes] | None = None
    ) -> None:
        super().__init__()
        self._state_lock = threading.Lock()
        self._state = bytearray(_SEED_BYTES + _SLACK)  # Key (32 bytes) || V (16) || spare
        self._since, self._seed_pid = 0, -1  # Key = V = 0: the first request seeds
        if _key_v is not None:
            key, v = _key_v
            if len(key) != 32 or len(v) != 16:
                raise ValueError("_key_v must be a 32-byte key and a 16-byte counter")
            self._state[:_SEED_BYTES] = bytes(key) + bytes(v)
            self._seed_pid = os.getpid()
        elif _entropy_input is not None:
            self._reseed(_entropy_input)

    def _encryptor(self):
        """AES-256-CTR under the current Key, starting at the counter block V + 1."""
        v = (int.from_bytes(self._state[32:_SEED_BYTES], "big") + 1) & _M128
        key = algorithms.AES(memoryview(self._state)[:32])  # no copy of the key in Python
        return Cipher(key, modes.CTR(v.to_bytes(16, "big"))).encryptor()

    def _reseed(self, entropy: bytes | None = None) -> None:
        """(Key, V) = Update(entropy, Key, V) with 48 fresh bytes of os.urandom."""
        seed = _entropy() if entropy is None else bytes(entropy)
        if len(seed) != _SEED_BYTES:
            raise ValueError(f"a CTR_DRBG seed is {_SEED_BYTES} bytes, got {len(seed)}")
        self._encryptor().update_into(seed, self._state)
        self._since, self._seed_pid = 0, os.getpid()

    def _generate(self, n: int) -> np.ndarray:
        blocks = (n + 1) // 2  # 16-byte AES blocks; an odd n drops the last half block
        out = np.empty(2 * blocks + _SLACK // 8, dtype=np.uint64)
        raw = out.view(np.uint8)
        piece = max(1, min(_PIECE_BYTES, _RESEED_BYTES) // 16)
        done = 0
        with self._state_lock:  # no two threads ever read the same Key and V
            while done < blocks:
                step = min(blocks - done, piece)
                if self._seed_pid != os.getpid() or self._since + 16 * step > _RESEED_BYTES:
                    self._reseed()  # a forked child, or the output limit of one seed
                enc = self._encryptor()
                enc.update_into(_ZEROS[: 16 * step], raw[16 * done :])  # Generate
                enc.update_into(_ZEROS[:_SEED_BYTES], self._state)  # Update: next Key || V
                self._since += 16 * step
                done += step
        out = out[:n]
        out.flags.writeable = False
        return out

    def _after_fork(self) -> None:
        super()._after_fork()
        self._state_lock = threading.Lock()
        self._seed_pid = -1

    def __repr__(self) -> str:
        return "RandomSource(AES-256 CTR_DRBG seeded from os.urandom, secure=True)"


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


def os_source() -> RandomSource:
    """A fresh secure source that reads ``os.urandom`` for every refill of its words.

    For whoever wants the operating system's generator alone rather than the default
    AES-256 CTR_DRBG seeded from it (:func:`check_rng` with ``None``); it is several times
    slower (``benchmarks/results/secure_source.md``). Pass it as ``rng=`` to any sampler
    or release; like the default it is thread-safe and a forked child never reuses its
    buffered words.

    Returns
    -------
    RandomSource
        A secure source (``secure`` is True) whose ``repr`` names ``os.urandom``.

    Examples
    --------
    >>> from matmech.privacy import noise
    >>> src = os_source()
    >>> src
    RandomSource(os.urandom, secure=True)
    >>> noise.discrete_gaussian(3.0, 4, rng=src).shape
    (4,)
    """
    return _OsSource()


def check_rng(rng=None) -> RandomSource:
    """Turn an ``rng`` argument into a :class:`RandomSource`.

    ``None`` -> a fresh secure source, AES-256 CTR_DRBG seeded from ``os.urandom`` (a
    new seed per call); a ``numpy.random.Generator`` -> a reproducible source that is NOT
    secure; a ``RandomSource`` (e.g. :func:`os_source`) -> itself. Anything else raises
    ``TypeError``.
    """
    if rng is None:
        return _CtrDrbgSource()
    if isinstance(rng, RandomSource):
        return rng
    if isinstance(rng, np.random.Generator):
        return _GeneratorSource(rng)
    raise TypeError(
        "rng must be None (secure randomness), a numpy.random.Generator "
        f"(reproducible, not secure) or a RandomSource, got {type(rng).__name__}: {rng!r}"
    )
