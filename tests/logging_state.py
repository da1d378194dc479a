"""A test's logging set-up undone after it: a command run in process (``run_command``) installs
a handler on the stream it found, which under ``capsys`` is a capture pytest closes after the
test. Left in place, every later log line of any test fails to write, and one that lands while
pytest prints its progress shows as a stray "Message: ..." in the run's output."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from horizon_broker._core.logs import LIBRARY_LOGGERS


@contextmanager
def logging_kept() -> Iterator[None]:
    """The root logger's handlers and level, and the libraries' levels, as they were before."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    library_levels = {name: logging.getLogger(name).level for name in LIBRARY_LOGGERS}
    try:
        yield
    finally:
        for handler in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(handler)
        for handler in [h for h in handlers if h not in root.handlers]:
            root.addHandler(handler)
        root.setLevel(level)
        for name, library_level in library_levels.items():
            logging.getLogger(name).setLevel(library_level)
