"""scripts/install-trtpool.sh, the install step shared by scripts/setup.sh and docker/Dockerfile.

The image runs it in copy mode (model.py copied into Triton's backend
directory); the set-up runs it in link mode on every call. Both checks are run
here against the project's environment, and its refusal of an environment
that cannot serve.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-trtpool.sh"


def install(python: str, backends: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), python, str(backends), *args], capture_output=True, text=True,
                          timeout=120)


def test_copy_mode_installs_the_backend_as_the_image_does(tmp_path):
    done = install(sys.executable, tmp_path / "backends")
    assert done.returncode == 0, done.stderr
    model = tmp_path / "backends" / "trtpool" / "model.py"
    assert not model.is_symlink()
    assert model.read_bytes() == (ROOT / "backend_src" / "model.py").read_bytes()


def test_link_mode_links_the_source_tree(tmp_path):
    done = install(sys.executable, tmp_path / "backends", "--link")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "backends" / "trtpool" / "model.py").resolve() == ROOT / "backend_src" / "model.py"


def test_an_environment_without_trtpool_is_refused(tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    done = install(str(bare / "bin" / "python"), tmp_path / "backends")
    assert done.returncode != 0
    assert "cannot serve trtpool" in done.stderr and "numpy" in done.stderr
