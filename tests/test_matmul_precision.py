"""train.matmul_precision: the trainers (single and population) set torch's float32 matmul precision
before training; null leaves whatever the user's script set."""

import pytest
import torch

import rlfunc

TINY = {"train.total_steps": 40, "train.learning_starts": 20, "train.eval_every": 40, "train.eval_episodes": 1,
        "train.checkpoint_every": 40, "train.progress": False, "train.tensorboard": False,
        "agent.hidden_sizes": [8, 8], "agent.num_critics": 2, "agent.updates_per_step": 1, "agent.batch_size": 8}


@pytest.fixture
def restore_precision():
    before = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(before)


@pytest.mark.parametrize("population", [False, True])
def test_the_run_sets_the_precision_and_null_leaves_the_users(tmp_path, restore_precision, population):
    extra = {"train.population": {"seeds": [0, 1]}} if population else {}
    torch.set_float32_matmul_precision("highest")
    rlfunc.train("configs/redq/pendulum.yaml", {**TINY, **extra, "train.matmul_precision": "high"}, run_dir=tmp_path / "a")
    assert torch.get_float32_matmul_precision() == "high"
    torch.set_float32_matmul_precision("medium")  # the user's own choice, then a run that names none
    rlfunc.train("configs/redq/pendulum.yaml", {**TINY, **extra}, run_dir=tmp_path / "b")
    assert torch.get_float32_matmul_precision() == "medium"


def test_high_leaves_cpu_float32_products_unchanged(restore_precision):
    """What the docs say: on a CPU, 'high' (TF32 on GPUs) computes exactly what full float32 does."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 96, generator=g), torch.randn(96, 32, generator=g)
    torch.set_float32_matmul_precision("highest")
    full = a @ b
    torch.set_float32_matmul_precision("high")
    assert torch.equal(a @ b, full)
