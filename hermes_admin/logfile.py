"""A log file in the data folder that stays private and never breaks a command.

:class:`PrivateFileHandler` is a ``WatchedFileHandler`` (several processes append
to one file: gunicorn workers, cron commands, background jobs; an external
``logrotate`` may move it) that opens its file only when the first record comes,
creates the folder ``0700`` and the file ``0600``, and, when the data folder cannot
be written, says so once on standard error and drops file logging for the process
instead of printing a traceback per record.
"""

from __future__ import annotations

import logging
import os
import sys
from logging.handlers import WatchedFileHandler
from pathlib import Path

from hermes_admin.private import DIR_MODE, FILE_MODE


class PrivateFileHandler(WatchedFileHandler):
    def __init__(self, filename: str, mode: str = "a", encoding: str | None = "utf-8", delay: bool = True):
        super().__init__(filename, mode=mode, encoding=encoding, delay=True)
        self._broken = False

    def _open(self):
        path = Path(self.baseFilename)
        path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), FILE_MODE)
        return os.fdopen(fd, "a", encoding=self.encoding)

    def emit(self, record: logging.LogRecord) -> None:
        if self._broken:
            return
        try:
            if self.stream is None:
                self.stream = self._open()
        except OSError as exc:
            self._broken = True
            sys.stderr.write(f"hermes-admin: cannot write the log file {self.baseFilename} ({exc.strerror}); "
                             "logging to standard error only\n")
            return
        try:
            super().emit(record)  # reopens a file rotated away meanwhile
        except OSError:
            self.handleError(record)
