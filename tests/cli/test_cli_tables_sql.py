"""``matmech tables-sql``: the query a warehouse runs for a spec's tables (issue 36); run in
DuckDB on the shipped people table, its result read back releases what the engine releases."""

import duckdb
import numpy as np
import pytest

import matmech
from matmech.cli import main
from matmech.io.specs import load_spec
from matmech.sources.engines import marginal_counts
from matmech.sources.given_tables import read_tables, workload_tables

from cli_cases import PEOPLE, _main_error


def test_the_printed_query_computes_the_tables_the_release_reads(capsys):
    spec_path = PEOPLE / "people.toml"
    csv = PEOPLE / "people.csv"
    assert main(["tables-sql", str(spec_path), "--table", f"read_csv('{csv}')"]) == 0
    sql = capsys.readouterr().out
    spec = load_spec(spec_path)
    subsets = workload_tables(spec.workload, len(spec.domain))
    # the spec's marginals [0], [1, 3], [2], []: the total lies inside every other table
    assert subsets == [(0,), (1, 3), (2,)]
    con = duckdb.connect()
    try:
        result = con.execute(sql).fetchdf()
    finally:
        con.close()
    tables = read_tables(result, spec.schema, subsets)
    want = marginal_counts(str(csv), spec.schema, subsets, engine="duckdb")
    assert sorted(tables) == subsets
    for s in subsets:
        np.testing.assert_array_equal(tables[s], want[s], err_msg=str(s))
    # handed in, the tables release what the engine's own counts release (same seed)
    kw = dict(max_records=10_000)
    got = matmech.release(tables, spec.workload, 1.0, 1e-6, rng=np.random.default_rng(3), **kw)
    ref = matmech.release(
        str(csv), spec.workload, 1.0, 1e-6, domain=spec.schema, rng=np.random.default_rng(3), **kw
    )
    np.testing.assert_array_equal(got.answers, ref.answers)
    np.testing.assert_array_equal(got.std, ref.std)


def test_spark_dialect_and_the_refusals(capsys, tmp_path):
    spec_path = str(PEOPLE / "people.toml")
    assert main(["tables-sql", spec_path, "--table", "people", "--dialect", "spark"]) == 0
    spark = capsys.readouterr().out
    assert main(["tables-sql", spec_path, "--table", "people"]) == 0
    plain = capsys.readouterr().out
    # Spark SQL quotes names with backticks, DuckDB with double quotes; both one GROUPING SETS
    assert "`age`" in spark and '"age"' in plain and spark != plain
    assert all(q.count("GROUPING SETS") == 1 and " FROM people" in q for q in (spark, plain))
    bare = tmp_path / "bare.toml"
    bare.write_text('name = "bare"\ndomain = [4, 3]\n[[queries]]\nkind = "marginals"\nk = 1\n')
    assert "declares no [[attributes]]" in _main_error(
        capsys, "tables-sql", str(bare), "--table", "t"
    )
    with pytest.raises(SystemExit) as info:  # argparse: a dialect it does not know
        main(["tables-sql", spec_path, "--table", "t", "--dialect", "oracle"])
    assert info.value.code == 2 and "--dialect" in capsys.readouterr().err
