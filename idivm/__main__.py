"""``python -m idivm``: the ``idivm`` command."""

import sys

from idivm.cli import main

sys.exit(main())
