"""scripts/setup.sh refuses an unsupported Python with a message that says what to do; scripts/test.sh
runs the set-up, then pytest with the README's arguments."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

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


def test_the_readmes_test_command_sets_up_then_runs_pytest_with_its_arguments():
    """`scripts/test.sh -k decoupled` as the README quotes it, collecting only (the suite itself runs
    under scripts/test.sh): the set-up's second run changes nothing, pytest gets the arguments."""
    from tests.corpus.fetch import corpus_dir
    from tests.corpus.manifest import CORPUS
    from tests.harness.docs import command_argv, quoted_command

    if not all((corpus_dir() / "models" / model.file_name).exists() for model in CORPUS):
        pytest.skip("the corpus is not fetched here: scripts/test.sh would download it first")
    done = subprocess.run([*command_argv(quoted_command("scripts/test.sh -k")), "--collect-only", "-q"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "[setup] venv up to date" in done.stdout and "[setup] ready:" in done.stdout, done.stdout
    collected = [line for line in done.stdout.splitlines() if "::" in line]
    assert collected and all("decoupled" in line.lower() for line in collected), collected
