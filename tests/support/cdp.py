"""A minimal headless-Chromium driver over the DevTools protocol, for the browser tests and
``tools/screenshot.py`` (a development tool: it is not part of the package).

Chromium is started with ``--remote-debugging-pipe``: protocol messages are NUL-terminated JSON
on file descriptors 3 (to the browser) and 4 (from it). This needs no websocket library and no
network port. Only what the report's screenshot and browser tests use is here.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from traceanalyzer.errors import UsageError

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def find_browser() -> str | None:
    """Path of a Chromium-family browser: $TRACEANALYZER_CHROMIUM, or the first on PATH."""
    env = os.environ.get("TRACEANALYZER_CHROMIUM")
    if env:
        return env
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def _above(fd: int, low: int) -> int:
    import fcntl

    new = fcntl.fcntl(fd, fcntl.F_DUPFD, low)
    os.close(fd)
    return new


class CDPError(RuntimeError):
    pass


class Browser:
    """One headless Chromium with one page target; use as a context manager."""

    def __init__(self, executable: str | None = None, *, width: int = 1280,
                 height: int = 900, timeout_s: float = 60.0) -> None:
        exe = executable or find_browser()
        if not exe:
            raise UsageError("no Chromium found: install it (Debian: apt-get install chromium) "
                             "or set TRACEANALYZER_CHROMIUM")
        self.timeout_s = timeout_s
        self._profile = tempfile.mkdtemp(prefix="ta-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # Move the child's ends above 4, so dup2 onto 3 and 4 cannot clobber one with the other.
        to_child_r, from_child_w = (_above(to_child_r, 10), _above(from_child_w, 10))
        args = [
            exe, "--headless=new", "--remote-debugging-pipe", "--no-sandbox",
            "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            "--no-default-browser-check", "--disable-extensions", "--disable-sync",
            "--disable-background-networking", "--disable-component-update",
            "--hide-scrollbars", "--mute-audio", f"--user-data-dir={self._profile}",
            f"--window-size={width},{height}", "about:blank",
        ]

        def child_fds() -> None:  # runs in the child: put the pipe ends at fds 3 and 4
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, preexec_fn=child_fds,
                                     pass_fds=(3, 4, to_child_r, from_child_w))
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.session: str | None = None
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next((t for t in targets if t.get("type") == "page"), None)
        target_id = page["targetId"] if page else self.call(
            "Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target_id,
                                 flatten=True)["sessionId"]

    # -- protocol ---------------------------------------------------------------------------
    def _send(self, msg: dict[str, Any]) -> None:
        data = json.dumps(msg).encode() + b"\0"
        while data:
            n = os.write(self._to_child, data)
            data = data[n:]

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CDPError("timed out waiting for Chromium")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise CDPError("Chromium exited")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, *, session: bool = True, **params: Any) -> dict[str, Any]:
        """Send a command and wait for its reply; events that arrive meanwhile are recorded."""
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session and self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        self._send(msg)
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise CDPError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_event(self, method: str, timeout_s: float | None = None) -> dict[str, Any]:
        for ev in self.events:
            if ev["method"] == method:
                return ev
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while True:
            ev = self._read_message(deadline)
            if "method" in ev:
                self.events.append(ev)
                if ev["method"] == method:
                    return ev

    def drain(self, quiet_s: float = 0.3) -> None:
        """Collect events until none arrives for ``quiet_s`` seconds."""
        while True:
            try:
                ev = self._read_message(time.monotonic() + quiet_s)
            except CDPError as exc:
                if "timed out" in str(exc):
                    return
                raise
            if "method" in ev:
                self.events.append(ev)

    # -- conveniences -----------------------------------------------------------------------
    def open(self, path: str | os.PathLike[str], *, dark: bool = False) -> None:
        """Load a local file and wait until it has loaded."""
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.call("Log.enable")
        self.call("Network.enable")
        self.call("Emulation.setEmulatedMedia", features=[
            {"name": "prefers-color-scheme", "value": "dark" if dark else "light"}])
        self.events.clear()
        self.call("Page.navigate", url=Path(path).resolve().as_uri())
        self.wait_event("Page.loadEventFired")
        self.drain()

    def evaluate(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in res:
            raise CDPError(f"script error: {res['exceptionDetails'].get('text')}")
        return res.get("result", {}).get("value")

    def screenshot(self, out: str | os.PathLike[str], *, full_page: bool = True,
                   width: int = 1280) -> None:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            h = int(self.evaluate("Math.ceil(document.documentElement.scrollHeight)") or 900)
            self.call("Emulation.setDeviceMetricsOverride", width=width, height=min(h, 16000),
                      deviceScaleFactor=1, mobile=False)
            self.drain(0.3)
            params["captureBeyondViewport"] = True
        data = self.call("Page.captureScreenshot", **params)["data"]
        Path(out).write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self._send({"id": 0, "method": "Browser.close", "params": {}})
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
