"""``python -m bench.clientcost``: moved to ``python -m bench.micro.nodeclient``.

Kept so the command in older notes and docs still works.
"""

from __future__ import annotations

import sys

from bench.micro.nodeclient import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
