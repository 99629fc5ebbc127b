"""The spill file of a streamed marginal release is read back checked (issue 31, item 4).

Before: the file was read back unchecked, and two flipped bytes moved a marginal cell by 65
(δ > 0). Now every block carries an HMAC-SHA256 under a key the store holds in memory: an
altered, truncated or swapped file raises IntegrityError naming the file. The sealed file
gives the numbers an array gives, bit for bit, for appends and in-place sums of any shape.
"""

import itertools
import re

import numpy as np
import pytest

from matmech import release_marginals
from matmech.results.store import BLOCK, ResidualStore, SealedFile
from matmech.linalg.terms import marginal_workload
from matmech.privacy.integrity import IntegrityError


def _release(tmp_path, delta, d=5, n=4):
    codes = np.random.default_rng(0).integers(0, n, size=(3000, d))
    W = marginal_workload((n,) * d, list(itertools.combinations(range(d), 3)))
    return release_marginals(
        codes, W, 1.0, delta, rng=np.random.default_rng(1), spill_dir=str(tmp_path)
    )


def _patch(path, at, xor):
    with open(path, "r+b") as f:
        f.seek(at)
        b = bytearray(f.read(len(xor)))
        f.seek(at)
        f.write(bytes(x ^ y for x, y in zip(b, xor)))


def _refused(rel, match):
    rel._cache.clear()  # the reconstruction's cache of lifted residuals
    with pytest.raises(IntegrityError, match=match) as info:
        for S in rel.subsets:
            rel.marginal(S)
    msg = str(info.value)
    assert msg.startswith(f"{rel.store.path}: the spill file of this release")
    assert not re.search(r"\d{3,}", msg.replace(rel.store.path, "")), msg
    return msg


@pytest.mark.parametrize("delta", [1e-6, 0.0], ids=["gaussian", "pure"])
def test_two_flipped_bytes_are_refused(tmp_path, delta):
    rel = _release(tmp_path, delta)
    ram = release_marginals(
        np.random.default_rng(0).integers(0, 4, size=(3000, 5)),
        rel.workload,
        1.0,
        delta,
        rng=np.random.default_rng(1),
    )
    assert ram.store.path is None
    for S in rel.subsets:  # on disk and in RAM: the same answers, bit for bit
        np.testing.assert_array_equal(rel.marginal(S)[0], ram.marginal(S)[0])
    size = rel.store.total * 8
    _patch(rel.store.path, size // 2, b"\x04\x01")
    _refused(rel, "was changed after matmech wrote it")


@pytest.mark.parametrize("delta", [1e-6, 0.0], ids=["gaussian", "pure"])
def test_a_truncated_or_reordered_spill_file_is_refused(tmp_path, delta):
    rel = _release(tmp_path, delta, d=6, n=5)  # 20 residuals of 64: 1,280+ values, 1+ blocks
    path = rel.store.path
    raw = open(path, "rb").read()
    with open(path, "r+b") as f:
        f.truncate(len(raw) - 8)
    _refused(rel, "was truncated")
    assert raw[:8] != raw[8:16]
    with open(path, "wb") as f:  # the same bytes, two values swapped
        f.write(raw[8:16] + raw[:8] + raw[16:])
    _refused(rel, "was changed")
    with open(path, "wb") as f:
        f.write(raw)
    rel._cache.clear()
    for S in rel.subsets:
        rel.marginal(S)


def test_blocks_cannot_be_swapped():
    """A block moved to another position fails: the MAC covers the block's index."""
    f = SealedFile(None, 3 * BLOCK, np.int64, zeros=False)
    values = np.arange(3 * BLOCK, dtype=np.int64) % 7  # blocks 0 and 1 hold equal bytes
    values[:BLOCK] = values[BLOCK : 2 * BLOCK]
    f.append(values)
    f.finish()
    np.testing.assert_array_equal(f.gather(np.array([0]), 3 * BLOCK)[1], values)
    raw = open(f.path, "rb").read()
    b = 8 * BLOCK
    with open(f.path, "wb") as out:
        out.write(raw[b : 2 * b] + raw[:b] + raw[2 * b :])  # identical blocks swap: no change
    f.gather(np.array([0]), 3 * BLOCK)
    with open(f.path, "wb") as out:
        out.write(raw[2 * b :] + raw[b : 2 * b] + raw[:b])
    with pytest.raises(IntegrityError, match="block 0 of 3 fails its check"):
        f.gather(np.array([0]), 1)


def test_a_block_never_written_must_read_as_zeros():
    f = SealedFile(None, 2 * BLOCK + 5, np.float64, zeros=True)
    assert not f.gather(np.array([BLOCK]), BLOCK + 5)[1].any()
    _patch(f.path, 8 * (2 * BLOCK + 1), b"\x01")
    with pytest.raises(IntegrityError, match="block 2 of 3, never written, is not zeros"):
        f.gather(np.array([2 * BLOCK]), 5)


@pytest.mark.parametrize("m", [1, 7, 729, BLOCK - 3, BLOCK + 11])
def test_sealed_store_equals_the_array_bit_for_bit(tmp_path, m):
    """Appends in chunks that straddle blocks, in-place sums over ranges of every kind, and
    reads of scattered and contiguous rows give exactly what one array gives."""
    rng = np.random.default_rng(m)
    count = int(rng.integers(3, 40)) if m > 7 else int(rng.integers(BLOCK // m, 3 * BLOCK // m))
    total = m * count
    offsets = np.arange(count, dtype=np.int64) * m
    # appended integers
    disk, ram = ResidualStore(offsets, total, str(tmp_path)), ResidualStore(offsets, total)
    at = 0
    while at < count:
        k = int(rng.integers(1, 6))
        J = np.arange(at, min(count, at + k))
        y = rng.integers(-(2**40), 2**40, size=(J.size, m))
        disk.write(J, y)
        ram.write(J, y)
        at += J.size
    disk.close()
    for J in (
        np.arange(count),
        rng.permutation(count)[: max(1, count // 3)],
        np.array([count - 1]),
    ):
        np.testing.assert_array_equal(disk.read(J, m), ram.read(J, m))
    # float sums in place
    disk = ResidualStore(offsets, total, str(tmp_path), accumulate=True)
    ram = ResidualStore(offsets, total, accumulate=True)
    for _ in range(6):
        J = rng.integers(0, count, size=int(rng.integers(1, 10)))  # repeats too
        rows = rng.standard_normal((J.size, m)) * 1e3
        disk.add(offsets[J], rows)
        ram.add(offsets[J], rows)
    disk.close()
    J = rng.permutation(count)
    np.testing.assert_array_equal(disk.read(J, m), ram.read(J, m))
    assert disk.path is not None and ram.path is None


def test_the_spill_file_is_private_and_removed(tmp_path):
    import gc
    import os
    import stat

    rel = _release(tmp_path, 1e-6)
    path = rel.store.path
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    del rel
    gc.collect()
    assert not os.path.exists(path)
