"""The Sphinx documentation builds with warnings treated as errors.

The check runs Sphinx's ``dummy`` builder: it reads every page, runs autodoc over the
package and resolves every cross-reference (where the warnings come from) but writes no
HTML, which took 30 s more of the suite's two cores for nothing the check looks at.
``python -m sphinx -b html docs docs/_build/html`` builds the site itself.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_docs_build_without_warnings(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-b",
            "dummy",
            str(ROOT / "docs"),
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert "build succeeded" in output, output[-3000:]
