"""idivm's benchmarks: ``python -m benchmarks run`` (the suite, ``suite.py``), and the scripts
``python benchmarks/devices.py`` and ``python benchmarks/yelp.py``; see ``benchmarks/README.md``.

The scripts import their neighbours as top-level modules (``from common import ...``), so this
package puts its own directory on ``sys.path``; its modules are imported by those names only
(``common``, ``devices``, ``yelp``, ``duck``, ``report``, ``suite``), never as
``benchmarks.<name>``, so that each is loaded once.
"""

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
