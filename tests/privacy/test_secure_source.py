"""The secure default source: AES-256 CTR_DRBG seeded from os.urandom (issue 24 item 5).

Known answers from NIST (SP 800-38A F.5.5 for the keystream, CAVP for the CTR_DRBG steps)
through the code that hands out words; fresh words in threads, forked children and after a
reseed; and the distribution of bytes and of discrete Gaussians drawn with ``rng=None``.
"""

import os
import sys
import threading
import time

import numpy as np
import pytest

from matmech.privacy import noise, randomness
from matmech.privacy.randomness import _CtrDrbgSource, check_rng, os_source
from sampler_exact import chi2_p

# ---------------------------------------------------------------- known answers

#: NIST SP 800-38A, F.5.5 CTR-AES256.Encrypt: key, initial counter block, plaintext and
#: ciphertext of four blocks; the keystream is plaintext XOR ciphertext.
F55_KEY = "603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4"
F55_COUNTER = "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff"
F55_PLAIN = (
    "6bc1bee22e409f96e93d7e117393172a" "ae2d8a571e03ac9c9eb76fac45af8e51"
    "30c81c46a35ce411e5fbc1191a0a52ef" "f69f2445df4f9b17ad2b417be66c3710"
)  # fmt: skip
F55_CIPHER = (
    "601ec313775789a5b7a7f504bbf3d228" "f443e3ca4d62b59aca84e990cacaf5c5"
    "2b0930daa23de94ce87017ba2d84988d" "dfc9c58db67aada613c2dd08457941a6"
)  # fmt: skip


def _f55_source() -> _CtrDrbgSource:
    v = (int(F55_COUNTER, 16) - 1).to_bytes(16, "big")  # Generate starts at V + 1
    return _CtrDrbgSource(_key_v=(bytes.fromhex(F55_KEY), v))


def test_keystream_is_sp800_38a_f55():
    keystream = bytes(a ^ b for a, b in zip(bytes.fromhex(F55_PLAIN), bytes.fromhex(F55_CIPHER)))
    # words64 of a fresh source fills its buffer with one Generate: the first 8 words are
    # the first 4 keystream blocks, in byte order
    assert _f55_source().words64(8).tobytes() == keystream
    assert _f55_source()._generate(7).tobytes() == keystream[:56]  # odd n: half a block
    assert _f55_source().words64(1 << 14)[:8].tobytes() == keystream  # unbuffered request


# NIST CAVP DRBG test vectors (drbgvectors_no_reseed and drbgvectors_pr_false, CTR_DRBG.rsp),
# [AES-256 no df], no personalization string, no additional input, 512 returned bits:
# Instantiate(EntropyInput) [Reseed(EntropyInputReseed)], Generate, Generate -> ReturnedBits.
CAVP_NO_RESEED = (
    "df5d73faa468649edda33b5cca79b0b05600419ccb7a879ddfec9db32ee494e5531b51de16a30f769262474c73bec010",
    None,
    "d1c07cd95af8a7f11012c84ce48bb8cb87189e99d40fccb1771c619bdf82ab22"
    "80b1dc2f2581f39164f7ac0c510494b3a43c41b7db17514c87b107ae793e01c5",
)
CAVP_RESEED = (
    "e4bc23c5089a19d86f4119cb3fa08c0a4991e0a1def17e101e4c14d9c323460a7c2fb58e0b086c6c57b55f56cae25bad",
    "fd85a836bba85019881e8c6bad23c9061adc75477659acaea8e4a01dfe07a1832dad1c136f59d70f8653a5dc118663d6",
    "b2cb8905c05e5950ca31895096be29ea3d5a3b82b269495554eb80fe07de43e1"
    "93b9e7c3ece73b80e062b1c1f68202fbb1c52a040ea2478864295282234aaada",
)


@pytest.mark.parametrize("entropy,reseed,returned", [CAVP_NO_RESEED, CAVP_RESEED])
def test_ctr_drbg_cavp_vectors(entropy, reseed, returned):
    src = _CtrDrbgSource(_entropy_input=bytes.fromhex(entropy))
    if reseed is not None:
        src._reseed(bytes.fromhex(reseed))
    first = src._generate(8)
    assert src._generate(8).tobytes().hex() == returned
    assert first.tobytes().hex() != returned  # the Update between the two requests


def test_a_bad_seed_length_is_refused():
    with pytest.raises(ValueError, match="48 bytes, got 47"):
        _CtrDrbgSource(_entropy_input=bytes(47))


# --------------------------------------------------------------------- the default


def test_default_is_a_fresh_secure_ctr_drbg_and_the_os_source_is_reachable():
    a, b = check_rng(None), check_rng(None)
    assert a.secure is True and isinstance(a, _CtrDrbgSource) and a is not b
    assert "CTR_DRBG" in repr(a) and "os.urandom" in repr(a)
    assert not np.array_equal(a.words64(4), b.words64(4))  # a fresh seed per call
    o = os_source()
    assert o.secure is True and repr(o) == "RandomSource(os.urandom, secure=True)"
    assert check_rng(o) is o and not np.array_equal(o.words64(4), os_source().words64(4))


def test_words_are_read_only_and_requests_never_repeat():
    src = check_rng(None)
    w = src.words64(1 << 14)
    assert not w.flags.writeable and w.dtype == np.uint64 and w.size == 1 << 14
    words = np.concatenate([w] + [src.words64(n) for n in (0, 1, 3, 5000, 1 << 13, 1 << 15)])
    assert np.unique(words).size == words.size


@pytest.mark.parametrize(
    "make",
    [lambda: check_rng(None), os_source, lambda: check_rng(np.random.default_rng(3))],
    ids=["default", "os", "generator"],
)
@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_a_source_cannot_be_copied_or_pickled(make, how):
    """A copy would hand out the words the original hands out next (copy.copy shared the
    buffer position: the same noise twice): every way of duplicating a source refuses, and
    the original keeps giving fresh words."""
    import copy
    import pickle

    dup = {"copy": copy.copy, "deepcopy": copy.deepcopy, "pickle": pickle.dumps}[how]
    src = make()
    first = src.words64(3)
    with pytest.raises(
        TypeError, match="RandomSource cannot be (copied|pickled).*same random words"
    ):
        dup(src)
    words = np.concatenate([first, src.words64(1 << 10)])
    assert np.unique(words).size == words.size
    # nor can an object holding one (two holders would share the DRBG state)
    with pytest.raises(TypeError, match="RandomSource cannot be"):
        (copy.deepcopy if how == "copy" else dup)({"rng": src})


class _SlowSource(_CtrDrbgSource):
    """The default source with a wide window between reading Key || V and the Update, so
    that threads racing without the lock would share keystream almost surely."""

    __slots__ = ()

    def _encryptor(self):
        enc = super()._encryptor()
        time.sleep(1e-4)
        return enc


@pytest.mark.parametrize("make", [lambda: check_rng(None), _SlowSource], ids=["default", "slow"])
def test_concurrent_threads_never_get_the_same_words(make):
    src, barrier, got = make(), threading.Barrier(4), [[] for _ in range(4)]

    def work(i: int) -> None:
        barrier.wait()
        for k in range(60):  # small (buffered) and large (direct) requests interleaved
            got[i].append(src.words64((1, 7, 1000, 9000)[(k + i) % 4]))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    words = np.concatenate([w for g in got for w in g])
    assert words.size == 4 * 15 * (1 + 7 + 1000 + 9000)
    assert np.unique(words).size == words.size


def _in_child(fn) -> bytes:
    """``fn()`` (bytes) run in a forked child, read back through a pipe."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report, then leave without running pytest teardown
        try:
            os.write(w, fn())
        finally:
            os._exit(0)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 1 << 16):
        chunks.append(chunk)
    os.close(r)
    os.waitpid(pid, 0)
    return b"".join(chunks)


def _next_words(src) -> bytes:
    return src.words64(4).tobytes() + src.words64(1 << 13).tobytes()  # buffered, then direct


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_never_reuses_the_parents_keystream():
    src = check_rng(None)
    src.words64(1)  # a buffer and a state the child inherits
    child = _in_child(lambda: _next_words(src))
    parent = _next_words(src)
    assert len(child) == len(parent) == 8 * (4 + (1 << 13))
    c, p = np.frombuffer(child, np.uint64), np.frombuffer(parent, np.uint64)
    assert np.intersect1d(c, p).size == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_reseeds_even_when_its_pid_was_seen_before():
    # a grandchild may get the pid its grandparent had; the at-fork hook reseeds anyway
    src, parent_pid = check_rng(None), os.getpid()
    src.words64(1)

    def child() -> bytes:
        os.getpid = lambda: parent_pid  # this child only: looks like the parent's pid
        return _next_words(src)

    c = np.frombuffer(_in_child(child), np.uint64)
    assert os.getpid() == parent_pid
    assert np.intersect1d(c, np.frombuffer(_next_words(src), np.uint64)).size == 0


def test_a_pid_change_without_the_fork_hook_reseeds(monkeypatch):
    seeds = []
    monkeypatch.setattr(randomness, "_entropy", lambda: seeds.append(os.urandom(48)) or seeds[-1])
    src = check_rng(None)
    src._generate(8)
    assert len(seeds) == 1
    monkeypatch.setattr(randomness.os, "getpid", lambda: -7)
    src._generate(8)
    assert len(seeds) == 2


def test_reseeds_from_the_os_at_the_output_limit(monkeypatch):
    key_v = (bytes(range(32)), bytes(16))
    ref = _CtrDrbgSource(_key_v=key_v)
    expected = [ref._generate(300) for _ in range(6)]  # the stream without reseeds
    seeds = []
    monkeypatch.setattr(randomness, "_entropy", lambda: seeds.append(os.urandom(48)) or seeds[-1])
    monkeypatch.setattr(randomness, "_RESEED_BYTES", 4096)  # 256 AES blocks per seed
    src = _CtrDrbgSource(_key_v=key_v)
    got, keys = [], []
    for _ in range(6):  # 150 blocks each: every request after the first needs a new seed
        got.append(src._generate(300))
        keys.append(bytes(src._state[:32]))
        assert 0 < src._since <= 4096
    assert len(seeds) == 5 and len(set(keys)) == 6
    assert np.array_equal(got[0], expected[0])  # same key and counter until the limit
    assert all(np.intersect1d(g, e).size == 0 for g, e in zip(got[1:], expected[1:]))
    big = src._generate(5000)  # 2500 blocks in one request: a reseed every 256 blocks
    assert len(seeds) == 5 + 10 and src._since <= 4096
    words = np.concatenate(got + [big])
    assert np.unique(words).size == words.size


# ------------------------------------------------------------------ distributions


def _byte_chi2(words: np.ndarray) -> float:
    """p-value of the 2048 (byte position, byte value) counts against uniform."""
    b = words.view(np.uint8).reshape(-1, 8).astype(np.int64)
    counts = np.bincount((np.arange(8) * 256 + b).ravel(), minlength=2048)
    return chi2_p(counts, np.full(2048, b.size / 2048))


class _ReusingSource(_CtrDrbgSource):
    """A broken source for the checks below: every word handed out twice."""

    __slots__ = ()

    def _generate(self, n: int) -> np.ndarray:
        return np.repeat(super()._generate((n + 1) // 2), 2)[:n]


def test_bytes_are_uniform_and_words_unique_and_both_checks_can_fail():
    words = check_rng(None).words64(1 << 18)
    assert _byte_chi2(words) > 1e-4
    assert np.unique(words).size == words.size
    bad = _ReusingSource().words64(1 << 18)
    assert _byte_chi2(bad) < 1e-12  # doubled counts double the statistic
    assert np.unique(bad).size == words.size // 2


def _gauss_mod_256(sigma: float) -> np.ndarray:
    """P[Z mod 256 = r] of the discrete Gaussian, summed directly over +-40 sigma."""
    k = np.arange(-int(40 * sigma) - 256, int(40 * sigma) + 257)
    p = np.bincount(k % 256, weights=np.exp(-(k.astype(float) ** 2) / (2 * sigma**2)))
    return p / p.sum()


@pytest.mark.parametrize("sigma", [30, 1000])
def test_discrete_gaussian_with_the_default_source_mod_256(sigma):
    n = 200_000
    z = noise.discrete_gaussian(sigma, n)  # rng=None: the CTR_DRBG
    assert chi2_p(np.bincount(z % 256, minlength=256), _gauss_mod_256(sigma) * n) > 1e-4
    # the variance, against the exact one within 5 standard errors (kurtosis of a
    # near-normal: Var[Z**2] = 2 sigma**4)
    assert abs(np.mean(z.astype(float) ** 2) - sigma**2) < 5 * np.sqrt(2 / n) * sigma**2
