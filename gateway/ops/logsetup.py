"""Process-wide logging set-up for ``gateway serve``, the workers and gunicorn.

Here, below both the app and the server, so that ``create_app`` (which calls it
under gunicorn) need not import the server package that imports the app.

Two formats (``log.format``, env ``GATEWAY_LOG_FORMAT``): ``"text"``, one
line of ``key=value`` fields after the time, level and logger; ``"json"``,
one JSON object per line for Loki or Elasticsearch, made by
python-json-logger (a maintained formatter, not a hand-rolled one). The JSON
object carries ``time``, ``level``, ``logger``, ``message`` and every field
a line passes as ``extra`` (failure lines: ``network``, ``node``,
``target`` = the redacted URL or Redis address, ``error_class``, ``error``,
``suppressed``), so a query can filter on them instead of parsing text.
"""

from __future__ import annotations

import logging
import os
from typing import Final

from pythonjsonlogger.json import JsonFormatter

# the text line's layout, and the fields a JSON line carries (plus any ``extra``)
_FIELDS: Final = "%(asctime)s %(levelname)s %(name)s %(message)s"
_RENAME: Final = {"asctime": "time", "levelname": "level", "name": "logger"}
_MARK: Final = "_gateway_handler"  # on the handler this module installed


def formatter(log_format: str) -> logging.Formatter:
    """The formatter for ``log.format`` (``"text"`` or ``"json"``)."""
    if log_format == "json":
        return JsonFormatter(_FIELDS, rename_fields=dict(_RENAME))
    return logging.Formatter(_FIELDS)


def setup_logging(log_format: str | None = None) -> None:
    """Log lines to stderr at ``$GATEWAY_LOG_LEVEL`` (INFO), unless a host configured logging.

    Gunicorn configures only its own loggers: without this the access log
    (``gateway.access``, INFO) was dropped there. ``log_format`` None: from
    ``$GATEWAY_LOG_FORMAT`` (text by default); the config's value is applied
    once it is loaded (``use_format``).
    """
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler()
    setattr(handler, _MARK, True)
    handler.setFormatter(formatter(log_format or os.environ.get("GATEWAY_LOG_FORMAT", "text")))
    root.addHandler(handler)
    root.setLevel(os.environ.get("GATEWAY_LOG_LEVEL", "INFO"))


def use_format(log_format: str) -> None:
    """Switch the handler ``setup_logging`` installed to ``log_format``; others are left alone."""
    for handler in logging.getLogger().handlers:
        if getattr(handler, _MARK, False):
            handler.setFormatter(formatter(log_format))
