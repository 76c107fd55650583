"""A one-line progress display for searches that take longer than a second.

Nothing is printed during the first second (fast compiles stay silent) or in quiet mode.
On a terminal the line is redrawn in place; elsewhere (logs, CI) one line is written per
phase change and a final summary, so logs stay short.
"""
from __future__ import annotations

import sys
import time

from compiler.timing import format_seconds


BAR = 20  # characters of the bar of trials tried


class Progress:
    """Counters of a running search, shown on stderr once it has run for `delay` seconds."""

    def __init__(self, title: str, quiet: bool = False, delay: float = 1.0, stream=None):
        self.title, self.quiet, self.delay = title, quiet, delay
        self.stream = stream if stream is not None else sys.stderr
        self.start = time.perf_counter()
        self.phase_name = "starting"
        self.tried = self.verified = self.rejected = self.total = 0
        self.best = float("inf")
        self.shown = False
        self._last_draw = 0.0
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def phase(self, name: str) -> None:
        self.phase_name = name
        self._draw(force=not self._tty)

    def update(self, **counters) -> None:
        for k, v in counters.items():
            setattr(self, k, v)
        self._draw()

    def line(self) -> str:
        elapsed = time.perf_counter() - self.start
        total = f"/{self.total}" if self.total else ""
        bar = ""
        if self.total:
            filled = round(BAR * min(self.tried, self.total) / self.total)
            bar = "[" + "#" * filled + "." * (BAR - filled) + "] "
        return (f"saturn: {self.title} {bar}[{self.phase_name}] {self.tried}{total} tried, "
                f"{self.verified} verified, {self.rejected} rejected, best {format_seconds(self.best)} "
                f"({elapsed:.1f} s)")

    def _draw(self, force: bool = False) -> None:
        if self.quiet:
            return
        now = time.perf_counter()
        if now - self.start < self.delay:
            return
        if self._tty:
            if not force and now - self._last_draw < 0.1:
                return
            self.stream.write("\r\x1b[K" + self.line())
        elif force:
            self.stream.write(self.line() + "\n")
        else:
            return
        self.stream.flush()
        self.shown = True
        self._last_draw = now

    def close(self, summary: str | None = None) -> None:
        """Finish the line (only if anything was shown, or the search ran past the delay)."""
        if self.quiet:
            return
        if time.perf_counter() - self.start < self.delay and not self.shown:
            return
        text = summary or self.line()
        self.stream.write(("\r\x1b[K" if self._tty else "") + text + "\n")
        self.stream.flush()
