"""dataloader-stall on small synthetic traces."""

from __future__ import annotations

from tests.support.synth import US, Synth, busy_loop, run


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
