"""The ``matmech`` command line: ``compare``, ``plot``, ``advise``, ``release``, ``budget``, ``tables-sql`` and ``stream``
(:mod:`matmech.cli.stream`).

Every failure the user can cause (missing file, bad spec, bad ε, a bad data file) ends with
a one-line message on stderr and exit status 2, never a traceback.

``release`` is the only command that reads data. Its noise always comes from the secure
CTR_DRBG seeded by the OS (deliberately no seed option). Its data file is a CSV (read with a
real parser: a UTF-8 BOM, ``--encoding``, ``--delimiter``) or a Parquet file. A spec that
declares its domain (``[[attributes]]``: ranges, bins, categories and their policies) is
applied to the raw columns inside an engine (DuckDB); a spec with bare sizes reads one
``--column`` per attribute holding integer codes 0 … n−1. Every output path is checked and
opened, the memory the release and its output need is checked against what the process can
still allocate and the answers file's space is reserved on disk, before anything is spent
(:mod:`matmech.limits`; docs/cli.md). ``release --ledger FILE`` charges a persistent privacy
ledger (``matmech budget init FILE --eps E``) before any noise. ``--round`` and
``--nonnegative`` are post-processing of the published answers (no privacy cost).

Start-up is kept short: the subcommand modules are imported when the parser is built, and
``matmech --version`` answers before that, without importing the library
(``benchmarks/import_time.py``). Long steps (``release``, ``advise``, ``plot``, ``stream
init``) draw a progress bar on stderr when it is a terminal (:mod:`matmech.cli.progress`).
"""

from __future__ import annotations

import argparse
import csv
import importlib
import sys

from matmech import __version__
from matmech.cli.common import one_line
from matmech.cli.progress import close_all

__all__ = ["build_parser", "main"]

#: One module per subcommand group (``matmech.cli.<name>``); each adds its subcommands to the
#: parser. Imported when the parser is built, not with this package.
SUBCOMMANDS = ("compare", "advise", "release", "budget", "tables_sql")

#: Options answered before the parser (and the library) is loaded.
VERSION_FLAGS = ("--version", "-V")


def build_parser():
    """The ``matmech`` argument parser (its reference page is generated from it)."""
    parser = argparse.ArgumentParser(
        prog="matmech",
        description="The Matrix Mechanism for linear queries under differential privacy.",
    )
    parser.add_argument(
        *VERSION_FLAGS, action="version", version=f"matmech {__version__}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMANDS:
        importlib.import_module(f"matmech.cli.{name}").add_parsers(sub)
    from matmech.cli.stream import add_stream_parser

    add_stream_parser(sub)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) == 1 and argv[0] in VERSION_FLAGS:  # before the subcommands' imports
        print(f"matmech {__version__}")
        return 0
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # e.g. `matmech release ... --json | head`: stop quietly
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (ValueError, TypeError, OSError, ImportError, csv.Error, MemoryError) as exc:
        close_all()  # end a progress bar's line before the message
        msg = one_line(exc)
        print(f"matmech: error: {msg}", file=sys.stderr)
        return 2
    finally:
        close_all()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
