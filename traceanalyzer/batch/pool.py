"""Run batch tasks on a local process pool that survives dying workers.

A worker that dies (killed by the OOM killer, a segfault in a native library, or by us for
running past ``--timeout``) breaks a ``ProcessPoolExecutor``: every unfinished future fails with
``BrokenProcessPool`` and the pool is unusable. This runner keeps at most ``workers`` tasks in
flight, so when the pool breaks the culprit is one of those few; it then

- marks a task it killed itself (timeout) as failed and retries the others in a new pool;
- marks the only in-flight task as failed when there was one;
- otherwise re-runs each in-flight task alone in a one-worker pool: the one that breaks that
  pool is the culprit and is marked failed; the others complete normally.

Workers are started with ``spawn`` (no fork of a parent that holds Polars thread pools) and
report ``(task, pid)`` when they start a task, which is how a timed-out task's worker is found.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue as queue_mod
import signal
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from traceanalyzer.batch.task import analyze_one
from traceanalyzer.cpus import usable_cpus
from traceanalyzer.errors import TraceAnalyzerError

#: (path, prior_key) for each task, by index.
Tasks = list[tuple[str, "str | None"]]
OnDone = Callable[[int, dict[str, Any]], None]

_POLL_S = 0.1
_QUEUED_PER_WORKER = 2
_started_queue: Any = None

DIED = "worker process died while analyzing this trace (killed, crashed or out of memory)"


def _init_worker(started: Any) -> None:
    global _started_queue
    _started_queue = started
    # Ctrl-C goes to the whole process group; let the parent decide what to do with it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


#: What a task runs: (path, prior_key, settings) -> outcome dict with at least path and status.
TaskFn = Callable[[str, "str | None", Any], dict[str, Any]]


def _pool_task(fn: TaskFn, index: int, path: str, prior_key: str | None,
               settings: Any) -> dict[str, Any]:
    if _started_queue is not None:
        _started_queue.put((index, os.getpid()))
    return fn(path, prior_key, settings)


@contextlib.contextmanager
def worker_threads_env(workers: int) -> Iterator[None]:
    """Give each of ``workers`` processes an equal share of the CPUs for Polars' thread pool.

    Polars sizes its pool from ``POLARS_MAX_THREADS`` when the process starts using it, so the
    variable must be in the environment the workers are spawned with. Without it, N workers
    each start one thread per CPU and fight over the cores. A user's own setting wins.
    """
    if "POLARS_MAX_THREADS" in os.environ:
        yield
        return
    os.environ["POLARS_MAX_THREADS"] = str(max(1, usable_cpus() // max(1, workers)))
    try:
        yield
    finally:
        os.environ.pop("POLARS_MAX_THREADS", None)


def failed_outcome(path: str, error: str) -> dict[str, Any]:
    return {"path": path, "status": "failed", "key": None, "format": None, "error": error,
            "json": None, "html": None, "seconds": 0.0}


def biggest_first(tasks: Tasks) -> list[int]:
    """Task indices, biggest file first: the last tasks to finish are then small ones, so no
    worker waits at the end for another's big trace (longest-processing-time-first scheduling).
    Ties keep their input order."""
    return sorted(range(len(tasks)), key=lambda i: -_file_size(tasks[i][0]))


class PoolRunner:
    """Runs ``fn`` (:func:`analyze_one` by default; any picklable module-level function of the
    same signature) for every task; calls ``on_done(index, outcome)`` in the parent."""

    def __init__(self, tasks: Tasks, settings: Any, workers: int, on_done: OnDone,
                 timeout_s: float | None = None, fn: TaskFn = analyze_one) -> None:
        self.fn = fn
        self.tasks = tasks
        self.settings = settings
        self.workers = max(1, workers)
        self.on_done = on_done
        self.timeout_s = timeout_s
        self.ctx = multiprocessing.get_context("spawn")
        #: How many times a pool had to be rebuilt (for the final report).
        self.restarts = 0

    def run(self) -> None:
        todo: deque[int] = deque(biggest_first(self.tasks))
        while todo:
            suspects, culprits = self._round(todo, self.workers)
            if not suspects:
                continue  # every task of the round completed
            self.restarts += 1
            for index, error in culprits.items():
                self._fail(index, error)
            rest = [i for i in suspects if i not in culprits]
            if culprits:  # the death is explained (we killed the worker): retry the others
                todo.extendleft(reversed(rest))
            elif len(rest) == 1:
                self._fail(rest[0], DIED)
            else:
                for index in rest:  # isolate: the suspect that breaks a pool of its own is it
                    alone, alone_culprits = self._round(deque([index]), 1)
                    for i, error in alone_culprits.items():
                        self._fail(i, error)
                    if alone and not alone_culprits:
                        self.restarts += 1
                        self._fail(index, DIED)

    def _fail(self, index: int, error: str) -> None:
        path = self.tasks[index][0]
        self.on_done(index, failed_outcome(path, f"{path}: {error}"))

    def _round(self, todo: deque[int], workers: int) -> tuple[list[int], dict[int, str]]:
        """Run tasks from ``todo`` until it is empty or the pool breaks.

        Returns the tasks in flight when the pool broke (suspects) and the tasks known to have
        killed it (index -> error). Both are empty when every task completed.
        """
        started_q = self.ctx.SimpleQueue()
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=self.ctx,
                                   initializer=_init_worker, initargs=(started_q,))
        inflight: dict[Future[dict[str, Any]], int] = {}
        started: dict[int, tuple[int, float]] = {}  # index -> (pid, monotonic start)
        culprits: dict[int, str] = {}
        broken = False
        try:
            with worker_threads_env(workers):
                # Spawned workers start on the first submit and inherit this environment.
                try:
                    pool.submit(int).result()
                except BrokenProcessPool:
                    broken = True
                    raise TraceAnalyzerError("batch: worker processes could not start "
                                             "(out of memory or processes?)") from None
            while (todo or inflight) and not broken:
                # One task queued behind each running one, so a worker starts its next trace
                # while the parent is still writing the last one's reports: a small trace takes
                # about as long as that round trip (bench/NOTES.md, "Batch: 2 workers vs 1").
                # A broken pool makes the queued tasks suspects too; the isolation round clears
                # them.
                while todo and len(inflight) < workers * _QUEUED_PER_WORKER:
                    index = todo.popleft()
                    path, prior = self.tasks[index]
                    inflight[pool.submit(_pool_task, self.fn, index, path, prior,
                                           self.settings)] = index
                done, _ = wait(inflight, timeout=_POLL_S, return_when=FIRST_COMPLETED)
                self._drain(started_q, started)
                for fut in done:
                    try:
                        outcome = fut.result()
                    except BrokenProcessPool:
                        broken = True
                        continue
                    except Exception as exc:  # noqa: BLE001 - e.g. an outcome that did not pickle
                        index = inflight.pop(fut)
                        self._fail(index, f"internal error: {exc!r}")
                        continue
                    self.on_done(inflight.pop(fut), outcome)
                if self.timeout_s is not None and not broken:
                    self._kill_overdue(inflight, started, culprits)
            if broken:
                return sorted(inflight.values()), culprits
            return [], {}
        except BaseException:
            self._kill_all(started, inflight)
            raise
        finally:
            pool.shutdown(wait=not broken, cancel_futures=True)
            started_q.close()

    def _drain(self, started_q: Any, started: dict[int, tuple[int, float]]) -> None:
        try:
            while not started_q.empty():
                index, pid = started_q.get()
                started[index] = (pid, time.monotonic())
        except (OSError, EOFError, queue_mod.Empty):
            pass

    def _kill_overdue(self, inflight: dict[Future[dict[str, Any]], int],
                      started: dict[int, tuple[int, float]], culprits: dict[int, str]) -> None:
        now = time.monotonic()
        for index in list(inflight.values()):
            if index in started and index not in culprits:
                pid, t0 = started[index]
                if now - t0 > self.timeout_s:
                    culprits[index] = f"timed out after {self.timeout_s:g} s (worker killed)"
                    _kill(pid)

    def _kill_all(self, started: dict[int, tuple[int, float]],
                  inflight: dict[Future[dict[str, Any]], int]) -> None:
        live = set(inflight.values())
        for index, (pid, _) in started.items():
            if index in live:
                _kill(pid)


def _file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
