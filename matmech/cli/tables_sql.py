"""``matmech tables-sql``: the one query a warehouse runs to compute the tables a spec reads.

For data that cannot come to matmech (issue 36, docs/guide/where-the-data-lives.md): the
spec's declared ``[[attributes]]`` compiled to SQL (:func:`matmech.sources.given_tables.tables_sql`)
over the tables a release of its workload reads (:func:`~matmech.sources.given_tables.workload_tables`).
Reads no data and spends nothing; the result goes back through
:func:`~matmech.sources.given_tables.read_tables`.
"""

from __future__ import annotations

from matmech.io.specs import load_spec
from matmech.sources.given_tables import tables_sql, workload_tables


def _cmd_tables_sql(args):
    spec = load_spec(args.spec)
    if spec.schema is None:
        raise ValueError(
            f"{args.spec}: the spec declares no [[attributes]] (their columns, ranges, bins or "
            "categories); the query maps raw columns to cells with them"
        )
    subsets = workload_tables(spec.workload, len(spec.domain))
    print(tables_sql(spec.schema, subsets, args.table, args.dialect))
    return 0


def add_parsers(sub):
    """The ``tables-sql`` subcommand."""
    p = sub.add_parser(
        "tables-sql",
        help="print the SQL computing the marginal tables a spec's release reads (reads no data)",
    )
    p.add_argument(
        "spec", help="a workload spec file (TOML) with [[attributes]] declaring the raw columns"
    )
    p.add_argument(
        "--table",
        required=True,
        metavar="SQL",
        help="the table holding the records, or a FROM item (e.g. \"read_parquet('f.parquet')\")",
    )
    p.add_argument(
        "--dialect",
        choices=("duckdb", "spark"),
        default="duckdb",
        help="duckdb (default) or spark (Spark SQL, close to most warehouses' SQL)",
    )
    p.set_defaults(func=_cmd_tables_sql)
