"""Package discovery for setuptools (everything else is in pyproject.toml).

The repository's ``scenarios/`` folder (hardware profiles, model presets, bundled
scenarios, baselines, trace metadata) ships inside the wheel as ``hicache/_bundled`` so an
installed ``hicache-lab`` finds its presets from any folder (``hicache.presets``). In a
source checkout the same files are read from ``scenarios/`` directly.
"""

from pathlib import Path

from setuptools import find_packages, setup

BUNDLED = "hicache._bundled"
DATA = Path(__file__).resolve().parent / "scenarios"
sub = sorted({p.parent.relative_to(DATA).as_posix() for p in DATA.rglob("*")
              if p.is_file() and p.parent != DATA})

setup(
    packages=[*find_packages(include=["hicache*", "sim*", "gpu_backend*", "validation*", "ipc*"]),
              BUNDLED, *(f"{BUNDLED}.{s.replace('/', '.')}" for s in sub)],
    package_dir={BUNDLED: "scenarios"},
    package_data={BUNDLED: ["*.yaml"], **{f"{BUNDLED}.{s.replace('/', '.')}":
                                          ["*.yaml", "*.json", "*.md"] for s in sub}},
)
