"""Process-wide logging set-up for ``gateway serve``, the workers and gunicorn.

Here, below both the app and the server, so that ``create_app`` (which calls it
under gunicorn) need not import the server package that imports the app.
"""

from __future__ import annotations

import logging
import os


def setup_logging() -> None:
    """Log lines to stderr at ``$GATEWAY_LOG_LEVEL`` (INFO), unless a host configured logging.

    Gunicorn configures only its own loggers: without this the access log
    (``gateway.access``, INFO) was dropped there.
    """
    if logging.getLogger().handlers:
        return
    logging.basicConfig(
        level=os.environ.get("GATEWAY_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
