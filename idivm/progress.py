"""Progress of long commands on a terminal: one bar (or, with no count known, a timer) that the
runtime's ``progress(message)`` callbacks feed.

:class:`Progress` is such a callback: each message becomes the bar's text, :meth:`Progress.step`
advances its count (views maintained, batches ingested).  The elapsed time is redrawn twice a
second while Spark works without a message.  On a stream that is not a terminal (a pipe, a file,
a test's capture) nothing is drawn at all; with ``echo`` the messages are then written as lines
instead (``maintain`` has always printed them on standard error).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import IO


class Progress:
    """A progress bar labelled ``label`` on ``stream`` (default standard error) when it is a
    terminal, counting to ``total`` (None: unknown)."""

    def __init__(self, label: str, total: int | None = None, stream: IO[str] | None = None,
                 echo: Callable[[str], None] | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self.label = label
        self.total = total
        self._echo = echo
        self._bar = None
        self._ticker: threading.Thread | None = None
        self._stopped = threading.Event()

    @property
    def drawn(self) -> bool:
        """Whether the bar is on a terminal."""
        try:
            return self.stream.isatty()
        except (AttributeError, ValueError):
            return False

    def __enter__(self) -> "Progress":
        if self.drawn:
            from tqdm import tqdm

            shape = "{desc}: {bar:20} {n_fmt}/{total_fmt} [{elapsed}]{postfix}" if self.total is not None \
                else "{desc} [{elapsed}]{postfix}"
            self._bar = tqdm(total=self.total, desc=self.label, file=self.stream, bar_format=shape, leave=False,
                             dynamic_ncols=True, mininterval=0.1)
            self._ticker = threading.Thread(target=self._tick, name="idivm-progress", daemon=True)
            self._ticker.start()
        return self

    def _tick(self) -> None:
        while not self._stopped.wait(0.5):
            bar = self._bar
            if bar is not None:
                bar.refresh()

    def __call__(self, message: str) -> None:
        """A step's message: the bar's text on a terminal, else a line through ``echo`` (if any)."""
        if self._bar is not None:
            self._bar.set_postfix_str(message.splitlines()[0] if message else "", refresh=True)
            if message.startswith("WARNING"):
                self._bar.write(message, file=self.stream)
        elif self._echo is not None:
            self._echo(message)

    def step(self, n: int = 1) -> None:
        """``n`` more of the ``total`` done."""
        if self._bar is not None:
            self._bar.update(n)
            self._bar.refresh()

    def print(self, text: str, write: Callable[[str], None]) -> None:
        """A line of the command's output, printed by ``write``, or above the bar while it is drawn."""
        if self._bar is not None:
            self._bar.write(text, file=sys.stdout)
        else:
            write(text)

    def __exit__(self, *exc) -> None:
        self._stopped.set()
        if self._ticker is not None:
            self._ticker.join()
        if self._bar is not None:
            self._bar.close()
            self._bar = None
