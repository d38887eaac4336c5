"""Copies of a frozen repo are readable by the sandbox's unprivileged user, whatever the source's modes."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from ai4ai.repo.workspace import copy_repo


def test_a_file_written_0600_is_readable_in_the_copy(tmp_path):
    # safetensors' save_file writes 0600: a maintainer's rerun of a repo's prepare step left the
    # prepared model unreadable to the training sandbox's user (every seed failed with EACCES)
    repo = tmp_path / "repo"
    (repo / "artifacts").mkdir(parents=True)
    secret = repo / "artifacts" / "base.safetensors"
    secret.write_bytes(b"weights")
    secret.chmod(0o600)
    (repo / "artifacts").chmod(0o700)
    outer = Path(tempfile.mkdtemp(prefix="ai4ai-copy-"))  # under /tmp: pytest's own folder is 0700
    try:
        outer.chmod(0o755)
        dest = copy_repo(SimpleNamespace(repo=repo), outer / "copy")
        copied = dest / "artifacts" / "base.safetensors"
        assert copied.stat().st_mode & 0o444 == 0o444
        assert (dest / "artifacts").stat().st_mode & 0o555 == 0o555
        if os.geteuid() != 0:
            pytest.skip("reading as another user needs root")
        out = subprocess.run([shutil.which("cat"), str(copied)], user=65534, capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout == "weights", out.stderr
    finally:
        shutil.rmtree(outer)


def test_a_run_folder_is_claimed_by_one_command_at_a_time(tmp_path):
    # two commands of one task started in the same second got the same Hydra folder and each moved
    # the other's seed folders away mid-run; the second now stops before writing anything
    run = tmp_path / "07-46-49_sft"
    code = (
        "import sys, time; from pathlib import Path; from ai4ai.entry import claim_run_dir; "
        f"claim_run_dir(Path({str(run)!r})); print('claimed', flush=True); time.sleep(30)"
    )
    first = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().strip() == "claimed"
        second = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert second.returncode != 0 and "in use by another command" in second.stderr
        assert "claimed" not in second.stdout
    finally:
        first.kill()
        first.wait()
    again = subprocess.run(
        [sys.executable, "-c", code.replace("time.sleep(30)", "pass")], capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0 and "claimed" in again.stdout, again.stderr
