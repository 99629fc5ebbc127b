"""``python -m matmech.cli``: the ``matmech`` command."""

import sys

from matmech.cli import main


sys.exit(main())
