"""``python -m matmech.cli``: the ``matmech`` command."""

import sys

from matmech.cli import main

__all__: list = []

sys.exit(main())
