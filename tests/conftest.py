"""Shared fixtures. The suite runs with one BLAS thread (this process and every subprocess it
starts): on a shared 2-core machine a multi-threaded OpenBLAS spins against the other jobs
(measured here: eigh of an 825×825 matrix 0.43 s on one thread, 5.3 s on two, 14.7 s on the
default count), which made the suite's run time depend on the machine's load."""

import os

os.environ["OPENBLAS_NUM_THREADS"] = "1"  # subprocesses (examples, CLI) inherit it
os.environ["OMP_NUM_THREADS"] = "1"
# ledger key records (matmech.privacy.keystore) go to a scratch directory, never the user's config
import tempfile  # noqa: E402

os.environ["MATMECH_LEDGER_KEYS"] = tempfile.mkdtemp(prefix="matmech-ledger-keys-")

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def _one_blas_thread():
    """numpy may be loaded already (by a plugin): cap the running OpenBLAS too."""
    from matmech.optimizers.blas import blas_threads

    with blas_threads(1):
        yield


@pytest.fixture(scope="session", autouse=True)
def _private_config_dir(tmp_path_factory):
    """Key files (streams: docs/guide/threat-model.md) go to a directory of the run's own,
    never the user's configuration directory; subprocesses inherit it."""
    old = os.environ.get("MATMECH_CONFIG_DIR")
    os.environ["MATMECH_CONFIG_DIR"] = str(tmp_path_factory.mktemp("matmech-config"))
    yield
    if old is None:
        os.environ.pop("MATMECH_CONFIG_DIR", None)
    else:
        os.environ["MATMECH_CONFIG_DIR"] = old


@pytest.fixture
def spec_files():
    files = sorted((ROOT / "workloads").glob("*.toml"))
    assert files, "no workload specs shipped"
    return files


@pytest.fixture
def root():
    return ROOT
