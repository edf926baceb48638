"""DrQ-v2 pure pieces: random shift, conv encoder, sigma schedule, clipped Normal,
encoder trained by the critic only, independent shifts, update compiles."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tensordict import TensorDict

from rlfunc.algos import drqv2
from rlfunc.core import nets
from rlfunc.core.augment import draw_shift, random_crop, random_shift
from rlfunc.core.dists import clipped_normal_sample
from rlfunc.core.optim import Adam

torch.set_num_threads(1)

B, A, C, H = 6, 2, 6, 16  # tiny: 2 stacked RGB frames of 16x16
TINY = dict(
    batch_size=B,
    feature_dim=8,
    hidden_dim=16,
    encoder_channels=(4, 4),
    encoder_strides=(2, 1),
    pad=2,
    frame_stack=2,
)


def _spaces():
    return gym.spaces.Box(0, 255, (C, H, H), np.uint8), gym.spaces.Box(-1.0, 1.0, (A,), np.float32)


def _setup(seed: int = 0, **overrides):
    config = drqv2.Config(**{**TINY, **overrides})
    state = drqv2.init(config, *_spaces(), seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    batch = TensorDict(
        {
            "obs": torch.randint(0, 256, (B, C, H, H), generator=gen, dtype=torch.uint8),
            "action": torch.rand(B, A, generator=gen) * 2 - 1,
            "reward": torch.randn(B, generator=gen),
            "discount": torch.where(torch.rand(B, generator=gen) < 0.2, 0.0, 0.99**3),
            "next_obs": torch.randint(0, 256, (B, C, H, H), generator=gen, dtype=torch.uint8),
        },
        batch_size=[B],
    )
    noise = drqv2.draw_noise(config, B, A, generator=gen)
    return config, state, batch, noise


# -- augmentation ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_random_shift_equals_slicing_the_replicate_padded_image(dtype):
    gen = torch.Generator().manual_seed(0)
    pad, n = 4, 40
    images = torch.randint(0, 256, (n, 3, 11, 13), generator=gen).to(dtype)
    shifts = draw_shift(n, pad, generator=gen)
    shifts[0] = torch.tensor([0, 0])
    shifts[1] = torch.tensor([2 * pad, 2 * pad])
    shifts[2] = torch.tensor([0, 2 * pad])
    out = random_shift(images, pad, shifts)
    assert out.dtype == dtype and out.shape == images.shape
    padded = F.pad(images.float(), (pad, pad, pad, pad), mode="replicate").to(dtype)
    for b in range(n):
        dx, dy = int(shifts[b, 0]), int(shifts[b, 1])
        assert torch.equal(out[b], padded[b, :, dy : dy + 11, dx : dx + 13]), b
    # the centre shift (pad, pad) is the identity
    assert torch.equal(random_shift(images, pad, torch.full((n, 2), pad)), images)


def test_random_shift_matches_official_grid_sample():
    from benchmarks.baselines.drqv2 import RandomShiftsAug

    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (8, 9, 20, 20), generator=gen).float()
    shifts = draw_shift(8, 4, generator=gen)
    torch.testing.assert_close(RandomShiftsAug(4)(x, shifts), random_shift(x, 4, shifts), atol=2e-3, rtol=0)


def test_shift_and_crop_errors_and_crop_slices():
    x = torch.arange(2 * 1 * 6 * 6).reshape(2, 1, 6, 6)
    with pytest.raises(ValueError, match=r"\[B, 2\]"):
        random_shift(x, 2, torch.zeros(3, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="integer"):
        random_shift(x, 2, torch.zeros(2, 2))
    crops = random_crop(x, 4, torch.tensor([[1, 2], [0, 0]]))
    assert torch.equal(crops[0], x[0, :, 2:6, 1:5]) and torch.equal(crops[1], x[1, :, 0:4, 0:4])


def test_obs_and_next_obs_get_independent_shifts():
    config, state, batch, _ = _setup()
    noise = drqv2.draw_noise(config, 256, A, generator=torch.Generator().manual_seed(3))
    assert not torch.equal(noise["shift_obs"], noise["shift_next_obs"])
    assert int(noise["shift_obs"].min()) == 0 and int(noise["shift_obs"].max()) == 2 * config.pad
    # update() applies shift_obs to obs and shift_next_obs to next_obs: recompute the loss by hand.
    _, state, batch, noise = _setup()
    _, metrics = drqv2.update(state, batch, noise)
    p = state["params"]
    std = drqv2.stddev(config, state["agent_step"])

    def loss_with(shift_o, shift_n):
        obs = random_shift(batch["obs"].float(), config.pad, shift_o)
        nxt = random_shift(batch["next_obs"].float(), config.pad, shift_n)
        next_h = drqv2.encode(config, p["encoder"], nxt)
        y = drqv2.compute_target(
            config, p["actor"], state["target", "critic"], next_h, batch["reward"], batch["discount"], std,
            noise["next_action"],
        )
        ec = TensorDict({"encoder": p["encoder"], "critic": p["critic"]}, [])
        return drqv2.critic_loss(ec, config, obs, batch["action"], y)[0]

    torch.testing.assert_close(metrics["critic_loss"], loss_with(noise["shift_obs"], noise["shift_next_obs"]))
    swapped = loss_with(noise["shift_next_obs"], noise["shift_obs"])
    assert not torch.allclose(metrics["critic_loss"], swapped)


# -- networks and distributions ---------------------------------------------------------


def test_conv_encoder_matches_nn_conv_and_official_shapes():
    assert nets.conv_encoder_output_shape((9, 84, 84)) == (32, 35, 35)
    gen = torch.Generator().manual_seed(0)
    p = nets.conv_encoder_init(3, (4, 5), generator=gen)
    w = p["0", "weight"].reshape(4, -1)
    torch.testing.assert_close(w @ w.T, 2.0 * torch.eye(4), atol=1e-5, rtol=0)  # orthogonal, ReLU gain^2 = 2
    x = torch.randint(0, 256, (2, 3, 12, 12), generator=gen, dtype=torch.uint8)
    ref = nn_conv = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, stride=2), torch.nn.ReLU(), torch.nn.Conv2d(4, 5, 3, stride=1), torch.nn.ReLU()
    )
    with torch.no_grad():
        for i, layer in enumerate((nn_conv[0], nn_conv[2])):
            layer.weight.copy_(p[str(i), "weight"])
            layer.bias.copy_(p[str(i), "bias"])
        expected = ref(x.float() / 255.0 - 0.5).flatten(1)
    out = nets.conv_encoder_apply(p, x, strides=(2, 1))
    assert out.shape == (2, 5 * 3 * 3)
    torch.testing.assert_close(out, expected)


def test_clipped_normal_straight_through_gradient():
    mean = torch.tensor([0.95, 0.0, -0.5], requires_grad=True)
    noise = torch.tensor([2.0, 10.0, 0.1])
    a = clipped_normal_sample(mean, 0.5, noise, clip=0.3)
    torch.testing.assert_close(a.detach(), torch.tensor([1.0 - 1e-6, 0.3, -0.45]))
    a.sum().backward()
    torch.testing.assert_close(mean.grad, torch.ones(3))  # as if unclamped
    unclipped = clipped_normal_sample(mean.detach(), 0.5, torch.tensor([0.0, 1.5, 0.0]), clip=None)
    assert float(unclipped[1]) == pytest.approx(0.75)  # acting noise is not clipped at 0.3


def test_sigma_schedule_values():
    config = drqv2.Config()
    for step, want in [(0, 1.0), (25_000, 0.775), (50_000, 0.55), (100_000, 0.1), (400_000, 0.1)]:
        assert float(drqv2.stddev(config, step)) == pytest.approx(want, abs=1e-6)
        assert float(drqv2.stddev(config, torch.tensor(step))) == pytest.approx(want, abs=1e-6)
    medium = drqv2.Config(stddev_duration=500_000)
    assert float(drqv2.stddev(medium, 250_000)) == pytest.approx(0.55, abs=1e-6)


def test_config_defaults_are_official_and_bad_spaces_are_rejected():
    c = drqv2.Config()
    assert (c.lr, c.batch_size, c.nstep, c.tau, c.update_every, c.feature_dim, c.hidden_dim) == (
        1e-4, 256, 3, 0.01, 2, 50, 1024
    )
    assert (c.encoder_channels, c.encoder_strides, c.pad, c.stddev_clip, c.frame_stack) == (
        (32, 32, 32, 32), (2, 1, 1, 1), 4, 0.3, 3
    )
    with pytest.raises(ValueError, match="image observations"):
        drqv2.init(c, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (1,)))
    with pytest.raises(ValueError, match="continuous"):
        drqv2.init(c, gym.spaces.Box(0, 255, (9, 84, 84), np.uint8), gym.spaces.Discrete(2))


# -- update -----------------------------------------------------------------------------


def test_encoder_learns_from_the_critic_only():
    """The new encoder is exactly one Adam step on the critic loss's encoder gradient."""
    config, state, batch, noise = _setup()
    new_state, metrics = drqv2.update(state, batch, noise)
    p = state["params"]
    std = drqv2.stddev(config, state["agent_step"])
    obs = random_shift(batch["obs"].float(), config.pad, noise["shift_obs"])
    nxt = random_shift(batch["next_obs"].float(), config.pad, noise["shift_next_obs"])
    y = drqv2.compute_target(
        config, p["actor"], state["target", "critic"], drqv2.encode(config, p["encoder"], nxt),
        batch["reward"], batch["discount"], std, noise["next_action"],
    )
    ec = TensorDict({"encoder": p["encoder"], "critic": p["critic"]}, [])
    grads = torch.func.grad(lambda q: drqv2.critic_loss(q, config, obs, batch["action"], y)[0])(ec)
    expected, _ = Adam(lr=config.lr).step(grads["encoder"], state["opt", "encoder"], p["encoder"])
    for k in expected.keys(True, True):
        torch.testing.assert_close(new_state["params", "encoder"][k], expected[k], atol=1e-7, rtol=1e-6)
    # and the actor loss, through features h, gives the encoder no gradient at all
    h = drqv2.encode(config, p["encoder"], obs)

    def actor_through_encoder(enc):
        return drqv2.actor_loss(p["actor"], config, p["critic"], drqv2.encode(config, enc, obs).detach(), std,
                                noise["action"])[0]

    g = torch.func.grad(actor_through_encoder)(p["encoder"])
    assert all(float(v.abs().max()) == 0.0 for v in g.values(True, True))
    assert h.shape == (B, 4 * 5 * 5)
    assert new_state["step"] == 1 and new_state["agent_step"] == state["agent_step"]
    assert set(metrics.keys()) >= {"critic_loss", "actor_loss", "critic_target_q", "stddev"}
    assert all(v.dim() == 0 for v in metrics.values())


def test_target_uses_online_encoder_and_polyak_tau():
    config, state, batch, noise = _setup()
    new_state, _ = drqv2.update(state, batch, noise)
    assert "encoder" not in new_state["target"].keys() and "actor" not in new_state["target"].keys()
    t0, t1, c1 = state["target", "critic"], new_state["target", "critic"], new_state["params", "critic"]
    for k in t0.keys(True, True):
        torch.testing.assert_close(t1[k], 0.99 * t0[k] + 0.01 * c1[k])


def test_act_noise_and_schedule():
    config, state, batch, _ = _setup()
    obs = batch["obs"][:2]
    mean = drqv2.act(state["params"], obs, deterministic=True, config=config)
    noise = torch.full((2, A), 0.5)
    a0 = drqv2.act(state["params"], obs, noise, config=config, step=0)
    a_end = drqv2.act(state["params"], obs, noise, config=config, step=10**6)
    torch.testing.assert_close(a0, torch.clamp(mean + 0.5, -1 + 1e-6, 1 - 1e-6))
    torch.testing.assert_close(a_end, torch.clamp(mean + 0.05, -1 + 1e-6, 1 - 1e-6))
    single = drqv2.act(state["params"], obs[0], deterministic=True, config=config)
    torch.testing.assert_close(single, mean[0])


@pytest.mark.compile
def test_update_compiles_fullgraph_and_matches_eager():
    """``fullgraph=True``: dynamo captures the whole update (any graph break raises) and AOT autograd
    functionalizes it. The ``aot_eager`` backend skips inductor's C++ code generation, which alone
    took minutes here for this graph; the inductor build is exercised by
    ``benchmarks/run.py update --algo drqv2`` (its ``functional-compiled`` variant)."""
    config, state, batch, noise = _setup()
    compiled = torch.compile(drqv2.update, fullgraph=True, backend="aot_eager")
    c_state, c_metrics = compiled(state, batch, noise)
    c_state, _ = compiled(c_state, batch, noise)  # a second call runs without recompiling errors
    e_state, e_metrics = drqv2.update(state, batch, noise)
    e_state, _ = drqv2.update(e_state, batch, noise)
    for k in e_metrics.keys():
        torch.testing.assert_close(c_metrics[k], e_metrics[k], atol=1e-5, rtol=1e-4)
    for k in e_state.exclude("config").keys(True, True):
        torch.testing.assert_close(c_state[k], e_state[k], atol=1e-5, rtol=1e-4)
