"""``python -m matmech``: the ``matmech`` command (:func:`matmech.cli.main`)."""

import sys

from matmech.cli import main


if __name__ == "__main__":
    sys.exit(main())
