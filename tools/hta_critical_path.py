"""HTA's critical path of the second ProfilerStep of each Kineto trace given, for
docs/critical-path.md ("Against HTA's critical path"). Runs in a virtual environment with
HolisticTraceAnalysis 0.5.0 and pandas < 3 (HTA calls DataFrame.drop with axis and columns,
which pandas 3 refuses):

    python -m venv /tmp/hta && /tmp/hta/bin/pip install HolisticTraceAnalysis "pandas<3"
    /tmp/hta/bin/python tools/hta_critical_path.py sample_traces/torch/*_bad.json.gz

Writes /tmp/hta_cp.json: per trace HTA's summary (% of the path by bound_by) and the path's
length in µs.
"""
import json
import os
import shutil
import sys
import time

from hta.trace_analysis import TraceAnalysis

out = {}
for p in sys.argv[1:]:
    name = os.path.basename(p)
    d = f"/tmp/hta_cp_run/{name}"
    os.makedirs(d, exist_ok=True)
    dst = os.path.join(d, name)
    if not os.path.exists(dst):
        shutil.copy(p, dst)
    t = time.time()
    try:
        a = TraceAnalysis(trace_dir=d)
        rank = list(a.t.traces.keys())[0]
        g, ok = a.critical_path_analysis(rank=rank, annotation="ProfilerStep", instance_id=1)
        s = g.summary() if ok else None
        bd = g.get_critical_path_breakdown()
        total = float(bd["duration"].sum()) if bd is not None else None
        out[name] = {"ok": ok, "rank": rank, "summary": {k: float(v) for k, v in (s.items() if s is not None else [])},
                     "path_us": total, "secs": time.time() - t}
    except Exception as e:
        out[name] = {"error": f"{type(e).__name__}: {e}"[:300], "secs": time.time() - t}
    print(name, out[name], flush=True)
json.dump(out, open("/tmp/hta_cp.json", "w"), indent=1)
