"""``python -m gateway``: the operator CLI (see ``gateway.cli``)."""

from __future__ import annotations

import sys

from gateway.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
