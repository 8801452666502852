"""structlog set-up. Only the CLI calls `configure_logging`; modules just `structlog.get_logger(__name__)`."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TextIO

import structlog


def configure_logging(*, json_file: Path | None = None, console: TextIO | None = None, level: str = "warning") -> None:
    """Send JSON lines to `json_file` (every event) and short lines to `console` (at `level` and above)."""
    handlers: list[logging.Handler] = []
    if json_file is not None:
        json_file.parent.mkdir(parents=True, exist_ok=True)
        file_handler = logging.FileHandler(json_file)
        file_handler.setLevel(logging.DEBUG)
        file_handler.addFilter(_structlog_or_warning)
        file_handler.setFormatter(
            structlog.stdlib.ProcessorFormatter(processor=structlog.processors.JSONRenderer(sort_keys=True))
        )
        handlers.append(file_handler)
    if console is not None:
        console_handler = logging.StreamHandler(console)
        console_handler.setLevel(getattr(logging, level.upper()))
        console_handler.setFormatter(structlog.stdlib.ProcessorFormatter(processor=structlog.dev.ConsoleRenderer(colors=False)))
        handlers.append(console_handler)
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


def _structlog_or_warning(record: logging.LogRecord) -> bool:
    """Every structlog event (hiera's and its plugins'), at every level; plain logging records of other
    libraries (matplotlib's font search, ...) from WARNING up."""
    return isinstance(record.msg, dict) or record.levelno >= logging.WARNING
