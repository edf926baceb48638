"""A user's own population script (review s31): settings as data that the update would
ignore, and likely argument mistakes, are refused in one sentence."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict

from rlfunc.algos import redq
from rlfunc.core import population

OBS, ACT = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (1,))
CONFIG = redq.Config(hidden_sizes=(8, 8), num_critics=3, updates_per_step=2, batch_size=8)


def _batch(g):
    G, B = CONFIG.updates_per_step, CONFIG.batch_size
    return TensorDict(
        {"obs": torch.randn(G, B, 3, generator=g), "action": torch.rand(G, B, 1, generator=g) * 2 - 1,
         "reward": torch.randn(G, B, generator=g), "next_obs": torch.randn(G, B, 3, generator=g),
         "terminated": torch.zeros(G, B)},
        batch_size=[G, B],
    )


def _noise(config, g):
    return redq.draw_noise(config, config.updates_per_step, config.batch_size, 1, generator=g)


def test_init_alpha_as_data_with_auto_alpha_is_refused_not_ignored():
    # Before: accepted and silently ignored (the update reads params["log_alpha"]), so the
    # member trained with alpha 1, not 0.3 as its single run with init_alpha=0.3 does.
    state = redq.init(CONFIG, OBS, ACT, seed=0)
    with pytest.raises(ValueError, match="init_alpha is only an initial value with auto_alpha on"):
        population.with_hparams(state, init_alpha=0.3)
    with pytest.raises(ValueError, match="init_alpha"):
        population.with_hparams(population.stack([state, state]), init_alpha=[0.3, 1.0])
    # the config's own value (what init set log_alpha from) stays accepted, as before
    own = redq.init(dataclasses.replace(CONFIG, init_alpha=0.2), OBS, ACT, seed=0)
    assert float(population.with_hparams(own, init_alpha=0.2)["hparams", "init_alpha"]) == pytest.approx(0.2)


def test_init_alpha_differing_configs_still_stack_and_match_single_runs():
    other = dataclasses.replace(CONFIG, init_alpha=0.3)
    states = [redq.init(CONFIG, OBS, ACT, seed=0), redq.init(other, OBS, ACT, seed=0)]
    pop = population.stack(states)
    g = torch.Generator().manual_seed(0)
    batch = _batch(g)
    noise = _noise(CONFIG, torch.Generator().manual_seed(1))
    out, _ = torch.vmap(redq.update, randomness="error")(
        pop, torch.stack([batch, batch]), torch.stack([noise, noise])
    )
    single, _ = redq.update(states[1], batch, noise)
    assert torch.allclose(population.member(out, 1)["params", "log_alpha"], single["params", "log_alpha"], rtol=1e-5)
    w, ws = population.member(out, 1)["params", "actor", "mean", "weight"], single["params", "actor", "mean", "weight"]
    assert torch.allclose(w, ws, rtol=1e-5, atol=1e-7)


def test_init_alpha_as_data_with_a_fixed_temperature_is_read():
    fixed = dataclasses.replace(CONFIG, auto_alpha=False)
    state = population.with_hparams(redq.init(fixed, OBS, ACT, seed=0), init_alpha=0.3)
    single = redq.init(dataclasses.replace(fixed, init_alpha=0.3), OBS, ACT, seed=0)
    batch, noise = _batch(torch.Generator().manual_seed(0)), _noise(fixed, torch.Generator().manual_seed(1))
    a, _ = redq.update(state, batch, noise)
    b, _ = redq.update(single, batch, noise)
    assert torch.allclose(a["params", "actor", "mean", "weight"], b["params", "actor", "mean", "weight"], rtol=1e-5, atol=1e-7)


def test_a_non_numeric_setting_is_one_sentence():
    # Before: TypeError "new(): invalid data type 'str'" (e.g. a YAML "1e-3" read as a string).
    state = redq.init(CONFIG, OBS, ACT, seed=0)
    with pytest.raises(ValueError, match=r"with_hparams: critic_lr must be a number.*'1e-3'"):
        population.with_hparams(state, critic_lr="1e-3")


def test_draw_per_member_with_one_generator_is_one_sentence():
    # Before: TypeError "'torch._C.Generator' object is not iterable".
    with pytest.raises(ValueError, match="one torch.Generator per member"):
        population.draw_per_member(lambda g: _noise(CONFIG, g), torch.Generator().manual_seed(0))


def test_three_seeds_vmapped_by_hand_equal_their_single_runs():
    states = [redq.init(CONFIG, OBS, ACT, seed=s) for s in range(3)]
    g = torch.Generator().manual_seed(0)
    batch = torch.stack([_batch(g) for _ in range(3)])
    noise = population.draw_per_member(lambda gen: _noise(CONFIG, gen), [torch.Generator().manual_seed(10 + k) for k in range(3)])
    out, metrics = torch.vmap(redq.update, randomness="error")(population.stack(states), batch, noise)
    for k in range(3):
        single, m = redq.update(states[k], batch[k], noise[k])
        for key, v in single.exclude("config").items(include_nested=True, leaves_only=True):
            torch.testing.assert_close(population.member(out, k)[key], v, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(metrics["critic_loss"][k], m["critic_loss"], rtol=1e-5, atol=1e-6)


def test_stacking_members_of_different_observation_spaces_names_at_most_three_leaves():
    """Members initialised for different observation spaces: the sentence listed every mismatched tensor
    (several hundred characters); it names three and counts the rest."""
    import gymnasium as gym

    from rlfunc.algos import redq
    from rlfunc.core import population

    config = redq.Config(hidden_sizes=(8, 8), num_critics=2, updates_per_step=1, batch_size=4)
    box = lambda n: gym.spaces.Box(-1.0, 1.0, (n,))  # noqa: E731
    a, b = redq.init(config, box(3), box(1), seed=0), redq.init(config, box(5), box(1), seed=1)
    with pytest.raises(ValueError, match=r"^stack: member 1's state does not match member 0's \(leaves of different "
                                         r"shapes or dtypes: [^,]+, [^,]+, [^,]+ and \d+ more\)\.$") as err:
        population.stack([a, b])
    assert len(str(err.value)) < 300


def test_states_stacked_with_torch_stack_name_population_stack():
    """README: "torch.vmap(redq.update) over stacked states". ``torch.stack`` of states keeps one config per
    member (a list); the update said "made with a tensordict.utils.LinkedList, not a redq.Config", which did not
    say what to do. Now it names rlfunc.core.population.stack, with which the same call trains."""
    g = torch.Generator().manual_seed(0)
    states = [redq.init(CONFIG, OBS, ACT, seed=i) for i in range(2)]
    batch = torch.stack([_batch(g) for _ in range(2)])
    noise = torch.stack([_noise(CONFIG, g) for _ in range(2)])
    for update in (redq.update, torch.vmap(redq.update)):
        with pytest.raises(ValueError, match=r"holds 2 configs \(states stacked with torch.stack\); stack the members' "
                                             r"states with rlfunc.core.population.stack\(states\)"):
            update(torch.stack(states), batch, noise)
    new, _ = torch.vmap(redq.update)(population.stack(states), batch, noise)
    assert new.batch_size == torch.Size([2])
