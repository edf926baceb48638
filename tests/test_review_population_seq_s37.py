"""Review (session 37) of populations of the sequence and pixel learners (DRQN, DQN, R2D2, DrQ-v2) end to
end, from a researcher's side: ``rlfunc train CONFIG --seeds --grid [--vectorize]``, SIGTERM and ``rlfunc
resume``, ``rlfunc eval``/``export``/``plot``/``rlfunc.load(...).predict`` of ``member-<k>``, the memory
refusal of P replays, each member's logs and ``config.yaml`` against its single run. What it found and fixed:

* a population whose network has a part without layers (``agent.encoder_sizes: []``, as every MinAtar and
  Atari DRQN, DQN and R2D2 config has after its conv torso) wrote a checkpoint that no resume could read:
  the stacked empty ``params/encoder`` has the batch size ``[P]``, which the checkpoint recorded with no
  tensor to hold it, and the loader refused every checkpoint of the run as damaged;
* ``rlfunc resume`` of a population wrote each member's stored settings over an edited
  ``member-<k>/config.yaml`` without a word (the population's own ``config.yaml`` was already refused when
  edited, as a single run's).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import yaml

import rlfunc
from rlfunc.runtime import population as pr
from rlfunc.runtime.checkpoint import load_checkpoint
from rlfunc.runtime.config import ConfigError

torch.set_num_threads(1)

TRAIN = {"eval_episodes": 1, "log_every": 30, "progress": False, "tensorboard": False, "compile": False, "threads": 1}
CUE = {"id": "rlfunc/CueMemory-v0", "num_envs": 1, "kwargs": {"delay": 5}}  # every episode: 6 steps
DRQN = {
    "algo": "drqn",
    "env": CUE,
    "train": {**TRAIN, "total_steps": 60, "learning_starts": 18, "replay_size": 100, "eval_every": 30,
              "checkpoint_every": 30},
    "agent": {"encoder_sizes": [], "lstm_size": 8, "sequence_length": 6, "batch_size": 4, "target_period": 10,
              "eps_decay_steps": 100, "train_every": 2},
}
R2D2 = {
    "algo": "r2d2",
    "env": {**CUE, "num_envs": 2},
    "train": {**TRAIN, "total_steps": 60, "learning_starts": 4, "replay_size": 100, "eval_every": 30,
              "checkpoint_every": 30},
    "agent": {"encoder_sizes": [], "lstm_size": 8, "head_sizes": [8], "burn_in": 2, "sequence_length": 6,
              "sequence_period": 3, "batch_size": 4, "samples_per_insert": 4, "target_period": 10},
}


def _with(config: dict, **train) -> dict:
    config = copy.deepcopy(config)
    config["train"].update(train)
    return config


def _equal_state(a, b) -> None:
    keys = set(a.keys(True, True))
    assert keys == set(b.keys(True, True))
    for key in keys:
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("config, vectorize", [(DRQN, "vmap"), (R2D2, "loop")], ids=["drqn-vmap", "r2d2-loop"])
def test_a_population_with_a_network_part_without_layers_resumes_where_the_uninterrupted_one_ends(
    tmp_path, config, vectorize
):
    """``agent.encoder_sizes: []`` (the MLP after MinAtar's and Atari's conv torsos) leaves ``params/encoder``
    an empty TensorDict; stacked, its batch size is ``[P]``. Its checkpoint was refused at every resume
    ("batch size [2] of 'state/params/encoder' does not fit its tensors"), so no MinAtar or Atari population
    could be resumed, after a SIGTERM either. Now a resume at an episode boundary ends bit for bit where the
    uninterrupted population does."""
    total = config["train"]["total_steps"]
    kw = dict(seeds=[0, 1], grid={"agent.lr": [1e-3, 3e-3]}, vectorize=vectorize)
    whole = pr.train(_with(config, total_steps=2 * total), run_dir=tmp_path / "whole", **kw)
    pr.train(config, run_dir=tmp_path / "cut", **kw)
    resumed = rlfunc.resume(tmp_path / "cut", total_steps=2 * total)
    assert [m.evals for m in resumed.members] == [m.evals for m in whole.members]
    mine, theirs = load_checkpoint(tmp_path / "cut")[0], load_checkpoint(tmp_path / "whole")[0]
    _equal_state(mine["state"], theirs["state"])
    for k in range(4):
        for key, v in rlfunc.load(tmp_path / "cut" / f"member-{k}").params.items(True, True):
            assert torch.equal(v, mine["state", "params"][key][k]), key


def test_an_edited_member_config_yaml_is_refused_at_resume_and_kept(tmp_path):
    """A member's ``config.yaml`` is read as a run's (``rlfunc plot``, ``rlfunc train member-<k>/config.yaml``),
    and a resume trains the checkpoint's settings and writes them there: an edit (a researcher changing member
    1's learning rate to continue it so) was overwritten without a word. Now it is refused in one sentence
    naming the file and the key, as an edited ``config.yaml`` of a single run or of the population is, and
    the file keeps the edit; with the edit undone the population resumes."""
    run = tmp_path / "run"
    config = copy.deepcopy(DRQN)
    config["agent"]["encoder_sizes"] = [8]
    pr.train(config, run_dir=run, seeds=[0], grid={"agent.lr": [1e-3, 3e-3]})
    path = run / "member-1" / "config.yaml"
    original = path.read_text()
    edited = yaml.safe_load(original)
    assert edited["agent"]["lr"] == 3e-3 and "population" not in edited["train"]
    edited["agent"]["lr"] = 5e-3
    path.write_text(yaml.safe_dump(edited, sort_keys=False))
    with pytest.raises(ConfigError, match=r"member-1/config\.yaml' differs from the checkpoint's config \(agent\.lr: 0\.005 there, 0\.003"):
        rlfunc.resume(run, total_steps=90)
    assert yaml.safe_load(path.read_text())["agent"]["lr"] == 5e-3  # the edit is not written over
    path.write_text(original)
    assert rlfunc.resume(run, total_steps=90).env_steps == 90


DRQV2 = {
    "algo": "drqv2",
    "env": {"id": "Pendulum-v1", "kwargs": {"render_mode": "rgb_array"},
            "wrappers": [{"pixels": {"size": 32, "frame_stack": 3, "action_repeat": 2}}]},
    "train": {**TRAIN, "total_steps": 12, "learning_starts": 8, "replay_size": 100, "eval_every": 12,
              "checkpoint_every": 12},
    "agent": {"batch_size": 64, "feature_dim": 8, "hidden_dim": 16, "encoder_channels": [8, 8],
              "encoder_strides": [2, 1]},
}


def test_a_vmapped_populations_update_working_memory_is_counted_for_every_member(tmp_path, monkeypatch):
    """P members' replays and states were checked before anything was allocated, but not the vmapped update's
    working memory, which holds every member's batch at once (DrQ-v2: ~3.3 MB a sample at 84x84, P times
    over): 8 members at ``agent.batch_size=1024`` passed the check on a 24 GB machine and needed 27 GB at the
    first update after the warm-up. Now it is one sentence before training naming ``agent.batch_size``, the
    member count and ``vectorize=loop``; looped (one member's update at a time) the same population fits."""
    from rlfunc.runtime import memory
    from rlfunc.runtime.learners.pixel import PixelLearner

    per_sample = PixelLearner.UPDATE_IMAGE_COPIES * 4 * 9 * 32 * 32  # the images alone, a lower bound
    one = 64 * per_sample + PixelLearner.UPDATE_FIXED_BYTES
    # room for one member's update (and every replay and state) but not for four members' at once
    monkeypatch.setattr(memory, "available_bytes", lambda device: int(1.5 * one))
    run = tmp_path / "vmapped"
    with pytest.raises(ConfigError, match=r"agent\.batch_size=64 for each of 4 vmapped members needs .* working memory.*"
                                          r"vectorize=loop"):
        pr.train(DRQV2, run_dir=run, seeds=[0, 1, 2, 3], vectorize="vmap")
    assert not run.exists()
    result = pr.train(DRQV2, run_dir=tmp_path / "looped", seeds=[0, 1, 2, 3], vectorize="loop")
    assert result.env_steps == 12 and result.vectorize == "loop"


def test_a_recorded_batch_size_of_a_part_without_tensors_loads_and_an_extra_empty_part_is_refused():
    """The fix lives in the checkpoint loader, not in populations: a batch size recorded for a TensorDict that
    holds no tensor (a stacked ``params/encoder`` without layers) makes that empty part, so checkpoints written
    before the fix load too; and the structure check counts empty parts, so one the config does not build is
    refused as any foreign entry is (one it builds with no batch size, which nothing records, is not missed)."""
    from pathlib import Path

    from tensordict import TensorDict

    from rlfunc.runtime.checkpoint import CheckpointError, _nest, check_structure

    flat = {("state", "params", "head", "weight"): torch.zeros(2, 3)}
    td = _nest(Path("ck"), flat, [(["state"], [2]), (["state", "params"], [2]), (["state", "params", "encoder"], [2])])
    assert td["state", "params", "encoder"].batch_size == torch.Size([2])
    expected = td.clone()
    check_structure(Path("ck"), td, expected, "state")
    crafted = td.clone()
    crafted["state", "params", "junk"] = TensorDict({}, [2])
    with pytest.raises(CheckpointError, match="holds state/params/junk, which this algorithm does not have"):
        check_structure(Path("ck"), crafted, expected, "state")
    unrecorded = td.clone()
    del unrecorded["state", "params", "encoder"]
    check_structure(Path("ck"), unrecorded, expected, "state")
