"""The population example (rlfunc/examples/redq_population.py) computes, for each member, what the
single-run example (redq_pendulum.py) computes with that member's seed and settings: bit for bit
with one member (no vmap: the single update on the only member's tensors), to float rounding with
more (batched matrix products sum in another order; the module doc of rlfunc.core.population)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rlfunc.core import population
from rlfunc.examples import redq_pendulum as single
from rlfunc.examples import redq_population as example

torch.set_num_threads(1)

TINY = dict(total_steps=200, learning_starts=100, num_critics=3, subset_size=2, updates_per_step=2, batch_size=16,
            hidden=16, eval_every=100, eval_episodes=1)


@pytest.fixture(scope="module")
def singles() -> dict:
    """redq_pendulum's runs of the members compared: (seed, critic_lr) -> its result."""
    return {(seed, lr): single.main(single.Args(seed=seed, critic_lr=lr, **TINY)) for seed, lr in
            ((5, 3e-4), (7, 3e-4), (5, 1e-3))}


def _largest_relative_difference(member: dict, ref: dict) -> float:
    return max(float((member[k] - ref[k]).abs().max() / ref[k].abs().max().clamp_min(1e-12))
               for k in ref.keys(True, True))


def test_one_member_is_its_single_run_bit_for_bit(singles):
    out = example.main(example.Args(seeds=[5], **TINY))
    ref = singles[(5, 3e-4)]
    assert [(s, r[0]) for s, r in out["evals"]] == ref["evals"]  # exact float equality
    member = population.member(out["state"], 0)
    for key in ref["state"]["params"].keys(True, True):
        assert torch.equal(member["params"][key], ref["state"]["params"][key]), key
    assert int(member["step"]) == int(ref["state"]["step"])


def test_seeds_and_rates_are_members_that_equal_their_single_runs(singles):
    out = example.main(example.Args(seeds=[5, 7], critic_lrs=[3e-4, 1e-3], **TINY))
    assert out["members"] == [(5, 3e-4), (5, 1e-3), (7, 3e-4), (7, 1e-3)]
    lrs = out["state"]["hparams", "critic_lr"]
    assert torch.allclose(lrs, torch.tensor([3e-4, 1e-3, 3e-4, 1e-3]))
    for k, key in enumerate(out["members"]):
        if key not in singles:
            continue
        ref = singles[key]
        member = population.member(out["state"], k)
        assert _largest_relative_difference(member["params"], ref["state"]["params"]) < 1e-5, key
        assert [s for s, _ in out["evals"]] == [s for s, _ in ref["evals"]]
        for (_, returns), (_, expected) in zip(out["evals"], ref["evals"]):
            assert returns[k] == pytest.approx(expected, rel=1e-5), key
    # the two rates of seed 5 trained apart
    first, second = (population.member(out["state"], k)["params"] for k in (0, 1))
    assert not torch.equal(first["critic", "0", "weight"], second["critic", "0", "weight"])


def test_flags_take_lists(capsys):
    args = example.parse_args(["--seeds", "0", "1", "2", "--critic-lrs", "3e-4", "1e-3"])
    assert args.seeds == [0, 1, 2] and args.critic_lrs == [3e-4, 1e-3]
    assert dataclasses.replace(example.parse_args([])).seeds == (0, 1, 2, 3)
