"""How many CPUs this process may use: what sizes worker pools and reader partitions.

``os.cpu_count()`` counts the whole host, which is wrong in the places traces are analyzed in
bulk: a container, a Kubernetes pod or a ``taskset`` slice of a big node.
"""

from __future__ import annotations

import math
import os
from pathlib import Path


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask (``taskset``, a container's cpuset),
    capped by a cgroup CPU quota (``docker --cpus``, Kubernetes limits).

    ``os.cpu_count()`` counts the whole host: under ``taskset -c 0,1`` on a 16-core machine it
    gave one worker 16 Polars threads on 2 CPUs, which spun for twice the CPU time of one
    thread and ran 20% slower.
    """
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        count = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    if quota is not None:
        count = min(count, quota)
    return max(1, count)


def _cgroup_cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The cgroup's CPU limit rounded up to whole CPUs, or None when there is none."""
    try:  # cgroup v2: "max 100000" or "200000 100000"
        quota, period = (root / "cpu.max").read_text().split()[:2]
        if quota != "max":
            return max(1, math.ceil(int(quota) / int(period)))
        return None
    except (OSError, ValueError):
        pass
    try:  # cgroup v1
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        if quota_us > 0 and period_us > 0:
            return max(1, math.ceil(quota_us / period_us))
    except (OSError, ValueError):
        pass
    return None
