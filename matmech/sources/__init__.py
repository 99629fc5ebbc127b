"""Data → the tables a plan asks for: the histogram, records through the counting engines
(numpy, DuckDB, Polars, Arrow, Spark), given marginal tables, per-period counts, and the one
:class:`~matmech.sources.source.DataSource` protocol the runner reads them through."""
