from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def spec_files():
    files = sorted((ROOT / "workloads").glob("*.toml"))
    assert files, "no workload specs shipped"
    return files


@pytest.fixture
def root():
    return ROOT
