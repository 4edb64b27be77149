"""scripts/setup.sh refuses an unsupported Python with a message that says what to do."""
from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_setup(tmp_path: Path, python: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": python, "HOME": str(tmp_path)}, timeout=60)


def test_old_python_is_refused_with_the_fix(tmp_path):
    fake = tmp_path / "python3.9"
    fake.write_text("#!/bin/sh\necho 3.9\n")
    fake.chmod(0o755)
    done = run_setup(tmp_path, str(fake))
    assert done.returncode != 0
    assert "Python 3.9: trtpool needs 3.10-3.13" in done.stderr and "PYTHON=" in done.stderr


def test_missing_python_is_refused_with_the_fix(tmp_path):
    done = run_setup(tmp_path, "no-such-python")
    assert done.returncode != 0
    assert "no 'no-such-python' on PATH" in done.stderr
