"""Test-suite settings.

Threads are pinned to 1: the CI machines have 2 cores, and with a second
process running, 2-thread matmuls slow down 3-20x (MACHINE-FACTS.md).

The suite runs on two pytest-xdist workers (``-n 2`` in pyproject's addopts),
one single-threaded test per core. The tests that start a Ray cluster form one
xdist group, so they run one after another on one worker: two embedded Ray
clusters at once would share the two cores with each other's actors and the
other worker, and their time bounds are set for one cluster.
"""

import os
import warnings

import pytest
import torch

torch.set_num_threads(1)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
warnings.filterwarnings("ignore", message=".*precision lowered by casting.*")


# Modules whose tests start Ray (embedded loopback clusters, Ray actors or Ray Tune).
RAY_MODULES = {
    "test_distributed_r2d2.py",
    "test_learn_population.py",
    "test_learn_stop.py",
    "test_review_loaded_guard_s37.py",
    "test_review_logs_s33.py",
    "test_review_scale_2.py",
    "test_review_scale_s36.py",
    "test_review_security_resume_s33.py",
    "test_review_sweep_s37.py",
    "test_sweep.py",
    "test_sweep_cluster.py",
}


@pytest.fixture(autouse=True)
def _torch_rng_left_as_found():
    """A test that seeds torch's global RNG (``torch.manual_seed``, e.g. to build an ``nn.Linear`` twice
    alike) leaves it as it found it: no test's unseeded draws depend on which tests ran before it."""
    state = torch.get_rng_state()
    yield
    torch.set_rng_state(state)


def pytest_collection_modifyitems(config, items):
    """Put every Ray test in the xdist group "ray" (one worker runs them in turn)."""
    for item in items:
        if item.path.name in RAY_MODULES:
            item.add_marker(pytest.mark.xdist_group("ray"))
