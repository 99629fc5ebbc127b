"""What every ``matmech`` subcommand shares: the privacy options, the output-path check and
the one-line error text (:func:`matmech.cli.main`); the progress bar is
:mod:`matmech.cli.progress`."""

from __future__ import annotations


CONVENTIONS = (
    "Conventions: add/remove neighbours; delta = 0 is pure eps-DP (Laplace noise, L1 sensitivity), "
    "delta > 0 the Gaussian mechanism (L2 sensitivity, zCDP-calibrated). Total error and max variance "
    "are variances in squared counts; RMSE/query is in counts."
)


def privacy_args(p, *, eps_required=False):
    if eps_required:  # a release spends privacy: never on a silent default
        p.add_argument(
            "--eps",
            type=float,
            required=True,
            help="privacy parameter epsilon (> 0) this release spends",
        )
    else:
        p.add_argument(
            "--eps", type=float, default=1.0, help="privacy parameter epsilon (> 0, default 1)"
        )
    p.add_argument(
        "--delta", type=float, default=0.0, help="delta in [0, 1); 0 means pure eps-DP (default)"
    )
    p.add_argument("--neighbors", choices=["add_remove", "substitute"], default="add_remove")
    p.add_argument(
        "--json", action="store_true", help="print machine-readable JSON instead of a table"
    )


def overwrite_arg(p):
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing output file (without it, an existing file is never overwritten)",
    )


def check_writable(path, flag, *, inputs=(), open_it=False, overwrite=False):
    """Fail before any work (and before a release spends privacy) if ``path`` cannot be written.

    Refused: an existing file unless ``overwrite`` (the user's ``--overwrite``: no command
    replaces a file it did not create unasked), a missing parent directory, a directory, an
    unwritable file or directory, and a path that is one of the ``inputs`` ({flag: path} of files the command reads: overwriting
    the data or the ledger would destroy it). ``open_it``: also create the temporary file the
    output is written to (renamed onto ``path`` by :func:`_write_answers`), so a release never
    spends for answers it cannot save; returns ``(handle, path)``.
    """
    import os
    import tempfile
    from pathlib import Path

    target = Path(path)
    parent = target.resolve().parent
    if not parent.is_dir():
        raise ValueError(f"{flag} {path}: the directory {parent} does not exist")
    if target.is_dir():
        raise ValueError(f"{flag} {path}: is a directory; give a file name")
    for other_flag, other in dict(inputs).items():
        if (
            other is not None
            and Path(other).exists()
            and target.exists()
            and os.path.samefile(other, target)
        ):
            raise ValueError(
                f"{flag} {path}: is the same file as {other_flag} {other}; refusing to overwrite it"
            )
        if other is not None and target.resolve() == Path(other).resolve():
            raise ValueError(
                f"{flag} {path}: is the same file as {other_flag} {other}; refusing to overwrite it"
            )
    if not os.access(parent, os.W_OK) or (target.exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"{flag} {path}: not writable")
    if target.exists() and not overwrite:
        raise ValueError(f"{flag} {path}: the file exists; pass --overwrite to replace it")
    if not open_it:
        return None
    try:
        handle = tempfile.NamedTemporaryFile(
            "w",
            newline="",
            encoding="utf-8",
            dir=parent,
            prefix=f".{target.name}.",
            suffix=".tmp",
            delete=False,
        )
    except OSError as exc:
        raise ValueError(f"{flag} {path}: cannot be written ({exc.strerror})") from None
    return handle, str(path)


def check_readable(path, flag, what="file"):
    """Fail with a clear message (before any work) if ``path`` is not a readable file: it
    does not exist, is a directory, or cannot be read."""
    import os
    from pathlib import Path

    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{flag} {path}: is a directory, not a {what}")
    if not p.exists():
        raise ValueError(f"{flag} {path}: no such {what}")
    if not os.access(p, os.R_OK):
        raise ValueError(f"{flag} {path}: the {what} cannot be read (permission denied)")


def one_line(exc):
    text = str(exc).splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        text = f"{exc.filename}: {exc.strerror}"  # e.g. an output directory that does not exist
    return text or type(exc).__name__
