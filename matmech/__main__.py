"""``python -m matmech``: the ``matmech`` command (:func:`matmech.cli.main`)."""

import sys

from matmech.cli import main

__all__: list = []

if __name__ == "__main__":
    sys.exit(main())
