"""Every notebook in notebooks/ runs top to bottom from any folder, and is saved with its
outputs (GitHub shows the figures).

Where Jupyter is installed (the ``notebooks`` extra; ``scripts/setup.sh --test``), through a
real kernel started in ``notebooks/``, as ``jupyter nbconvert --execute`` and JupyterLab do;
elsewhere the code cells run in one namespace from a temporary folder (no Jupyter needed).
A notebook's own ``assert`` lines (e.g. "more L2 never hurts the hit rate") fail here too.
No wall-clock bounds: speed targets live in benchmarks/.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import matplotlib
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
NAMES = sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))
MACHINE_PATH = re.compile(r"(/work/|/root/|/home/|\.\./shared)")


def cells(path: Path, kind: str = "code") -> list[dict]:
    nb = json.loads(path.read_text())
    assert nb["nbformat"] == 4
    return [c for c in nb["cells"] if c["cell_type"] == kind]


def test_there_are_notebooks_saved_with_outputs_and_no_machine_paths() -> None:
    assert {"quick_tour", "capacity_planning"} <= set(NAMES)
    for name in NAMES:
        path = NOTEBOOKS / f"{name}.ipynb"
        code = cells(path)
        assert code, name
        assert all(c.get("execution_count") for c in code), f"{name}: not saved executed"
        outputs = [o for c in code for o in c.get("outputs", [])]
        assert not [o for o in outputs if o.get("output_type") == "error"], name
        assert any("image/png" in o.get("data", {}) for o in outputs), f"{name}: no figure"
        sources = "".join("".join(c["source"]) for c in code)
        assert not MACHINE_PATH.search(sources), f"{name}: a path outside the repository"


HAS_JUPYTER = (importlib.util.find_spec("nbclient") is not None
               and importlib.util.find_spec("ipykernel") is not None)


@pytest.mark.skipif(HAS_JUPYTER, reason="run in a Jupyter kernel instead (below)")
@pytest.mark.parametrize("name", NAMES)
def test_notebook_code_runs_top_to_bottom_from_another_folder(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)  # not the repository, not notebooks/
    namespace: dict = {"__name__": "__main__"}
    for i, cell in enumerate(cells(NOTEBOOKS / f"{name}.ipynb")):
        source = "".join(cell["source"])
        try:
            exec(compile(source, f"{name}.ipynb[cell {i}]", "exec"), namespace)  # noqa: S102
        except Exception as e:
            raise AssertionError(f"{name}: code cell {i} failed: {e!r}\n{source}") from e
    assert any(Path(namespace["OUT"]).glob("*.png"))
    assert list(tmp_path.iterdir()) == []  # nothing written where the kernel started


@pytest.mark.skipif(not HAS_JUPYTER, reason="Jupyter not installed (pip install .[notebooks])")
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_in_a_jupyter_kernel_started_in_notebooks(name: str) -> None:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    before = sorted(NOTEBOOKS.iterdir())
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert not errors
    assert sorted(NOTEBOOKS.iterdir()) == before  # nothing written where the kernel started
