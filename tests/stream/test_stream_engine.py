"""Per-period counts from a data engine equal a direct count, and feed a stream."""

import numpy as np
import pandas as pd
import pytest

from matmech.io.domain import categories, integer_range
from matmech.sources.periods import period_counts
from matmech.stream.plan import StreamSpec
from matmech.stream.release import StreamRelease


def _records():
    rng = np.random.default_rng(5)
    return pd.DataFrame(
        {"day": rng.integers(0, 10, 500), "region": rng.choice(["north", "south", "east"], 500)}
    )


@pytest.mark.parametrize("engine", ["duckdb", "numpy"])
def test_period_counts_match_a_direct_count(engine, tmp_path):
    df = _records()
    got = period_counts(
        df,
        period=integer_range("day", 0, 9),
        category=categories("region", ["north", "south", "east"]),
        engine=engine,
    )
    want = np.array(
        [
            [((df.day == d) & (df.region == r)).sum() for r in ["north", "south", "east"]]
            for d in range(10)
        ]
    )
    np.testing.assert_array_equal(got, want)
    path = tmp_path / "r.parquet"
    df.to_parquet(path)
    np.testing.assert_array_equal(
        period_counts(str(path), period=integer_range("day", 0, 9))[:, 0], want.sum(1)
    )
    s = StreamRelease.create(
        tmp_path / "s.db",
        StreamSpec(10, eps=1.0, delta=1e-6, categories=("north", "south", "east")),
        rng=np.random.default_rng(0),
    )
    for row in got:
        res = s.step(row)
    assert res.t == 9 and len(res.values) == 3


def test_period_must_be_declared():
    with pytest.raises(TypeError, match="declared attributes"):
        period_counts(_records(), period="day")
