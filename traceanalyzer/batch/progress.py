"""The batch's progress bar."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """A one-line progress bar on stderr; silent when not a terminal or when disabled."""

    def __init__(self, total: int, enabled: bool, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.total = total
        self.done = 0
        self.failed = 0
        self.t0 = time.monotonic()

    def update(self, failed: bool) -> None:
        self.done += 1
        self.failed += failed
        if not self.enabled:
            return
        width = 30
        filled = width * self.done // max(self.total, 1)
        rate = self.done / max(time.monotonic() - self.t0, 1e-9)
        extra = f", {self.failed} failed" if self.failed else ""
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}"
                          f"{extra}  {rate:.1f} traces/s ")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.done:
            self.stream.write("\n")
            self.stream.flush()

