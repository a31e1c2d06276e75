"""``python -m hicache.scenario [FILE]``: print (or write) the scenario JSON Schema.

The committed copy is ``docs/scenario.schema.json`` (a test keeps it current); point an
editor's YAML language server at it for completion and checks while writing scenarios.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hicache.scenario.model import json_schema_text

if __name__ == "__main__":
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(json_schema_text())
    else:
        sys.stdout.write(json_schema_text())
