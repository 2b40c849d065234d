"""Run batch tasks on a Dask distributed cluster (``--dask ADDRESS`` or ``--dask local``).

Only paths travel to the workers; each worker reads its traces from a filesystem it shares with
the client. Reports come back as text and the client writes them, so the output folder only has
to exist on the client. Dask is optional: it is imported here, lazily, and a missing install is
a one-line error.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from traceanalyzer.batch.pool import OnDone, TaskFn, Tasks, failed_outcome
from traceanalyzer.batch.task import analyze_one
from traceanalyzer.errors import UsageError

LOCAL = "local"


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise UsageError("--dask needs Dask: pip install 'traceanalyzer[dask]' "
                         "(dask[distributed])") from None
    return distributed


def run_dask(tasks: Tasks, settings: Any, address: str, workers: int,
             on_done: OnDone, fn: TaskFn = analyze_one, retries: int = 0) -> None:
    """Submit ``fn`` (:func:`analyze_one` by default) for every task to the cluster at
    ``address`` (or a new LocalCluster for "local"). ``retries``: Dask's own, for a task whose
    worker died (a bad trace is an outcome, never an exception)."""
    distributed = _import_distributed()
    cluster = None
    try:
        if address == LOCAL:
            from traceanalyzer.batch.pool import worker_threads_env

            with worker_threads_env(workers):
                cluster = distributed.LocalCluster(n_workers=max(1, workers),
                                                   threads_per_worker=1, processes=True,
                                                   dashboard_address=":0",
                                                   silence_logs=logging.ERROR)
            client = distributed.Client(cluster)
        elif os.path.isfile(address):  # a scheduler file written by `dask scheduler`
            client = distributed.Client(scheduler_file=address, timeout="30s")
        else:
            client = distributed.Client(address, timeout="30s")
    except (OSError, TimeoutError, ValueError) as exc:
        if cluster is not None:
            cluster.close()
        raise UsageError(f"--dask {address}: cannot connect to the scheduler ({exc})") from None
    try:
        _submit_all(distributed, client, tasks, settings, on_done, fn, retries)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _submit_all(distributed: Any, client: Any, tasks: Tasks, settings: Any,
                on_done: OnDone, fn: TaskFn = analyze_one, retries: int = 0) -> None:
    settings_future = client.scatter(settings, broadcast=True)
    index_of: dict[str, int] = {}
    futures = []
    for index, (path, prior) in enumerate(tasks):
        # pure=False: the same path must be analyzed again on a new run, never served from
        # the scheduler's memory of an earlier one.
        fut = client.submit(fn, path, prior, settings_future, pure=False, retries=retries,
                            key=f"traceanalyzer-{index}-{os.urandom(6).hex()}")
        index_of[fut.key] = index
        futures.append(fut)
    for fut in distributed.as_completed(futures):
        index = index_of[fut.key]
        try:
            outcome = fut.result()
        except distributed.KilledWorker:
            outcome = failed_outcome(tasks[index][0], f"{tasks[index][0]}: Dask worker died while "
                                     "analyzing this trace (killed, crashed or out of memory)")
        except Exception as exc:  # noqa: BLE001 - a task error must not stop the batch
            outcome = failed_outcome(tasks[index][0], f"{tasks[index][0]}: internal error: "
                                     f"{exc!r}")
        fut.release()
        on_done(index, outcome)
