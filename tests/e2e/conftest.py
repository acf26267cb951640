"""Shared fixtures for the end-to-end tests: the shoal binary, the shared
test data beside the repository, and models fetched by scripts/fetch-models."""
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"


@pytest.fixture(scope="session")
def shoal_bin():
    path = Path(os.environ.get("SHOAL_BIN", ROOT / "build" / "shoal"))
    if not path.exists():
        pytest.fail(f"shoal binary not found at {path}: build first (scripts/build)")
    return str(path)


@pytest.fixture(scope="session")
def shared():
    return SHARED


def fetch(name):
    out = subprocess.run([str(ROOT / "scripts" / "fetch-models"), name], check=True,
                         capture_output=True, text=True, timeout=1800)
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def smollm2():
    return fetch("smollm2-135m")


def run_shoal(shoal_bin, *args, timeout=600, input=None):
    return subprocess.run([shoal_bin, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, input=input)
