"""memcpy-bound on small synthetic traces, the link table, and real H200 traces of one program
in three variants (pageable copies, pinned copies, data kept on the GPU)."""

from __future__ import annotations

import pytest

from tests.support.paths import PUBLIC, SAMPLES
from tests.support.synth import US, Synth, busy_loop, run
from traceanalyzer.analysis.views import Views
from traceanalyzer.devices import host_link
from traceanalyzer.ingest import read_any
from traceanalyzer.model import Device
from traceanalyzer.rules import RuleConfig, evaluate

MB = 1_000_000


def copy_steps(s: Synth, *, copy_us: float = 800, compute_us: float = 100, nbytes: int = 8 * MB,
               kind: str = "HtoD", steps: int = 5, overlap: bool = False) -> None:
    """Each step copies ``nbytes`` (taking ``copy_us``) then computes for ``compute_us``; with
    ``overlap`` the copy runs on a side stream beside the previous step's compute instead."""
    t = 0.0
    for _ in range(steps):
        s.kernel(f"Memcpy {kind} (Pinned -> Device)", t, copy_us, kind="memcpy",
                 stream=9 if overlap else 7, bytes=nbytes, copy_kind=kind,
                 src_kind="pinned", dst_kind="device", api="cudaMemcpyAsync")
        start = t if overlap else t + copy_us + 2
        busy_loop(s, n=1, dur=copy_us + 2 if overlap else compute_us, start=start)
        t = start + (copy_us + 2 if overlap else compute_us) + 5


def test_fires_when_the_gpu_mostly_copies_with_the_bandwidth_against_the_link():
    s = Synth()
    copy_steps(s)
    f = run(s)[0]["memcpy-bound"]
    assert f.impact_ns == 5 * 800 * US  # every copy ran with no kernel beside it
    # 8 MB in 800 µs = 10 GB/s on an H200's PCIe Gen5 x16 (63 GB/s each way)
    assert "host to device 40 MB at 10.0 GB/s (16% of the link's 63 GB/s)" in f.message
    assert "PCIe Gen5 x16" in f.message and "assumed" not in f.message
    assert "well below the link's rate" in f.message
    assert f.evidence[0]["direction"] == "HtoD" and f.evidence[0]["gb_per_s"] == pytest.approx(10.0)


def test_quiet_when_copies_hide_behind_compute_or_are_a_small_share():
    s = Synth()
    copy_steps(s, overlap=True)  # the same copies beside kernels: the GPU computes as much
    assert run(s)[1]["memcpy-bound"].status == "quiet"
    s = Synth()
    copy_steps(s, copy_us=100, compute_us=800)
    assert run(s)[1]["memcpy-bound"].status == "quiet"


def test_device_to_device_copies_are_not_link_copies():
    s = Synth()
    copy_steps(s, kind="DtoD")
    assert run(s)[1]["memcpy-bound"].status == "quiet"


def test_not_applicable_without_copy_directions_and_quiet_without_copies():
    s = Synth()
    s.kernel("Memcpy", 0, 800, kind="memcpy", bytes=8 * MB)
    busy_loop(s, n=1, dur=100, start=805)
    assert run(s)[1]["memcpy-bound"].status == "not_applicable"
    s = Synth()
    busy_loop(s, n=5)
    assert run(s)[1]["memcpy-bound"].status == "quiet"


def test_thresholds_change_the_verdict():
    s = Synth()
    copy_steps(s, copy_us=300, compute_us=500)  # copies 37% of the active time
    assert run(s)[1]["memcpy-bound"].status == "quiet"
    assert "memcpy-bound" in run(s, **{"memcpy-bound": {"min_copy_share_pct": 30}})[0]
    s = Synth()
    copy_steps(s)
    assert run(s, **{"memcpy-bound": {"min_impact_pct": 95}})[1]["memcpy-bound"].status == "quiet"


def test_the_link_follows_the_device_and_says_when_it_is_assumed():
    s = Synth()
    s.devices = [Device(0, "NVIDIA GH200 480GB", 132, None, "9.0", "nvidia")]
    copy_steps(s)
    assert "NVLink-C2C, 450 GB/s" in run(s)[0]["memcpy-bound"].message
    s = Synth()
    s.devices = [Device(0, None, None, None, None, "nvidia")]
    copy_steps(s)
    message = run(s)[0]["memcpy-bound"].message
    assert "PCIe Gen4 x16" in message and "assumed: the trace does not say" in message


@pytest.mark.parametrize(("name", "cc", "vendor", "link", "assumed"), [
    ("Tesla V100-SXM2-16GB", "7.0", "nvidia", "PCIe Gen3 x16", False),
    ("NVIDIA A100-PG509-200", "8.0", "nvidia", "PCIe Gen4 x16", False),
    ("NVIDIA GeForce RTX 3080", "8.6", "nvidia", "PCIe Gen4 x16", False),
    ("NVIDIA H100 80GB HBM3", "9.0", "nvidia", "PCIe Gen5 x16", False),
    ("NVIDIA H200", "9.0", "nvidia", "PCIe Gen5 x16", False),
    ("NVIDIA B200", "10.0", "nvidia", "PCIe Gen5 x16", False),
    ("NVIDIA GH200 480GB", "9.0", "nvidia", "NVLink-C2C", False),
    ("AMD Instinct MI250X", "9.0", "amd", "PCIe Gen4 x16", False),
    ("AMD Instinct MI300X", "9.4", "amd", "PCIe Gen5 x16", False),
    ("AMD Radeon Graphics", "9.0", "amd", "PCIe Gen4 x16", True),  # how ROCm names an MI250
    ("NVIDIA Some Future GPU", "12.0", "nvidia", "PCIe Gen5 x16", True),
    (None, None, None, "PCIe Gen4 x16", True),
])
def test_host_links(name, cc, vendor, link, assumed):
    got = host_link(Device(0, name, None, None, cc, vendor))
    assert (got.name, got.assumed) == (link, assumed)
    assert got.practical_gbps < got.nominal_gbps


@pytest.mark.parametrize(("cus", "gfx", "gib", "link"), [
    (104, "9.0", 64, "PCIe Gen4 x16"),  # an MI250 GCD, as HTA's MI250 trace records it
    (304, "9.4", 192, "PCIe Gen5 x16"),  # an MI300X
])
def test_an_amd_gpu_known_by_its_properties_has_its_link_not_an_assumed_one(cus, gfx, gib, link):
    got = host_link(Device(0, "AMD Radeon Graphics", cus, gib * 2**30, gfx, "amd"))
    assert (got.name, got.assumed) == (link, False)


# --- real traces ----------------------------------------------------------------------------------


def _outcome(path):
    if not path.is_file():
        pytest.skip(f"{path} is not available")
    findings, outcomes = evaluate(Views(read_any(path)), RuleConfig())
    return {f.slug: f for f in findings}.get("memcpy-bound"), {o.slug: o for o in outcomes}["memcpy-bound"]


PROGRAMS = SAMPLES / "programs" / "torch"


def test_h200_program_copying_from_pageable_memory():
    # 128 MiB of features to the GPU and 32 MiB back each step, from and to pageable memory.
    f, _ = _outcome(PROGRAMS / "copy_bound_pageable_torch.json.gz")
    assert f is not None and f.severity == "critical" and f.impact_pct > 80
    assert "host to device 537 MB at 6.6 GB/s" in f.message and "PCIe Gen5 x16" in f.message
    assert "well below the link's rate" in f.message


def test_h200_program_copying_from_pinned_memory_runs_near_the_link_rate():
    f, _ = _outcome(PROGRAMS / "copy_bound_pinned_torch.json.gz")
    assert f is not None and f.impact_pct > 80
    assert "host to device 537 MB at 55.4 GB/s (88% of the link's 63 GB/s)" in f.message
    assert "already run near the link's rate" in f.message


def test_h200_program_with_its_data_on_the_gpu_is_quiet():
    f, outcome = _outcome(PROGRAMS / "copy_bound_resident_torch.json.gz")
    assert f is None and outcome.status == "quiet"


@pytest.mark.parametrize("name", ["nsysai_2gpu_sendrecv_before.sqlite",
                                  "nsysai_2gpu_sendrecv_after.sqlite"])
def test_two_gpu_nsys_export_is_quiet(name):
    # Its copies are device to device (4 GB at 1.4 TB/s) and 17 tiny host-to-device ones: 1% of
    # the window. It is not copy-bound.
    f, outcome = _outcome(PUBLIC / "nsys" / name)
    assert f is None and outcome.status == "quiet"
