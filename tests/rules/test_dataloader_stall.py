"""dataloader-stall on small synthetic traces, and on a real torchrec trace."""

from __future__ import annotations

import pytest

from tests.support.paths import PUBLIC
from tests.support.synth import US, Synth, busy_loop, run
from traceanalyzer.analysis.views import Views
from traceanalyzer.ingest import read_any
from traceanalyzer.rules.detectors.dataloader_stall import loader_ranges


def test_dataloader_stall_fires_when_gpu_waits_for_data():
    s = Synth()
    for step in range(3):
        t = step * 3000
        s.step(step, t, 3000)
        s.annotation("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", t, 2000)
        busy_loop(s, n=4, start=t + 2010)
    f = run(s)[0]["dataloader-stall"]
    assert "DataLoader" in f.message
    # steps 1 and 2 load for 2000 µs while the GPU idles; step 0's loading precedes the window
    assert f.impact_ns == 2 * 2000 * US


def test_dataloader_stall_from_nvtx_ranges_as_nsight_systems_records_them():
    # Nsight Systems records no DataLoader span of its own: the rule sees loading there only
    # through NVTX ranges (a user's nvtx.range("load_batch"), or torch.autograd.profiler.
    # emit_nvtx(), which turns the DataLoader's record_function into one).
    s = Synth()
    for step in range(3):
        t = step * 3000
        s.step(step, t, 3000)
        s.annotation("load_batch", t, 2000, kind="nvtx")
        busy_loop(s, n=4, start=t + 2010)
    assert run(s)[0]["dataloader-stall"].impact_ns == 2 * 2000 * US


def test_dataloader_stall_quiet_when_prefetched_and_na_without_ranges():
    s = Synth()
    end = busy_loop(s, n=20)
    s.annotation("load_batch", 100, end - 200)  # loading while the GPU is busy
    _, outcomes = run(s)
    assert outcomes["dataloader-stall"].status == "quiet"
    s = Synth()
    busy_loop(s, n=5)
    assert run(s)[1]["dataloader-stall"].status == "not_applicable"


def test_dataloader_stall_from_python_frames_without_a_dataloader():
    # A loop that builds its batch itself: only with_stack=True Python frames show the loading.
    s = Synth()
    for step in range(3):
        t = step * 3000
        s.step(step, t, 3000)
        s.op("train.py(60): step", t, 2990, kind="python")
        for j in range(8):
            s.op("data/images.py(24): __getitem__", t + 5 + j * 250, 240, kind="python")
        s.op("torch/nn/modules/container.py(330): __getitem__", t + 2005, 5, kind="python")
        busy_loop(s, n=4, start=t + 2010)
    f = run(s)[0]["dataloader-stall"]
    assert "__getitem__" in f.message and "train.py" not in f.message
    assert f.impact_ns == 2 * 8 * 240 * US


# --- names that are not data loading ---------------------------------------------------------------


def _stalls_in(names: list[str]) -> Synth:
    """Three steps, each opening with 2 ms in host ranges named ``names`` (one after the other)
    while the GPU idles, then 0.8 ms of GPU work."""
    s = Synth()
    for step in range(3):
        t = step * 3000
        s.step(step, t, 3000)
        share = 2000 / len(names)
        for i, name in enumerate(names):
            s.annotation(name, t + i * share, share)
        busy_loop(s, n=4, start=t + 2010)
    return s


def test_torchrec_input_all_to_alls_are_communication_not_data_loading():
    # torchrec's TrainPipelineSparseDist ranges (names as recorded on an A100 DLRM run): the
    # sparse features' all-to-all between ranks is communication, whatever "data" its name has.
    s = _stalls_in(["## sparse_data_dist ##", "## wait_sparse_data_dist ##",
                    "## all2all_data:lengths ##", "## all2all_tw_data:wait ##"])
    s.kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", 2500, 100, stream=20)
    _, outcomes = run(s)
    assert outcomes["dataloader-stall"].status == "not_applicable"


def test_names_that_merely_contain_data_are_not_data_loading():
    s = _stalls_in(["update_metadata", "data_parallel_setup", "load_checkpoint",
                    "model.load_state_dict", "## metrics:add ##"])
    assert run(s)[1]["dataloader-stall"].status == "not_applicable"


def test_loading_beside_communication_counts_only_the_loading():
    s = _stalls_in(["## load_batch ##", "## sparse_data_dist ##"])  # 1 ms each
    f = run(s)[0]["dataloader-stall"]
    assert "## load_batch ##" in f.message and "sparse_data_dist" not in f.message
    assert f.impact_ns == 2 * 1000 * US  # steps 1 and 2 (step 0's precedes the window)
    s = _stalls_in(["## wait_for_batch ##"])
    assert run(s)[0]["dataloader-stall"].impact_ns == 2 * 2000 * US
    s = _stalls_in(["enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"])
    assert "DataLoader" in run(s)[0]["dataloader-stall"].message


def test_on_a_real_torchrec_trace_only_the_batch_ranges_load_data():
    # HTA's A100 DLRM rank (torchrec ranges): the loading is ## load_batch ##, ## wait_for_batch ##
    # and the DataLoader's iterator, never the ## sparse_data_dist ## / ## all2all_* ## ranges.
    path = PUBLIC / "kineto" / "hta_a100_rank3of8_control.json.gz"
    if not path.is_file():
        pytest.skip("the public traces are not available")
    names = set(loader_ranges(Views(read_any(path)))["name"].to_list())
    assert names == {"## load_batch ##", "## wait_for_batch ##",
                     "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"}
