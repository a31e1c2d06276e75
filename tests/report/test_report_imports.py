"""The reporting layer never pulls in simpy, torch, the simulator or the GPU backend."""

import subprocess
import sys

MODULES = ["frames", "intervals", "metrics", "window", "perfetto", "plots", "compare"]


def test_report_imports_no_simulator_or_torch():
    code = (
        "import sys\n"
        + "".join(f"import hicache.report.{m}\n" for m in MODULES)
        + "bad = [m for m in ('simpy', 'torch', 'sim', 'gpu_backend') if m in sys.modules]\n"
        + "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
