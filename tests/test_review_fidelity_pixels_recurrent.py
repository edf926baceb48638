"""Fidelity review of DrQ-v2, R2D2 and DRQN against transcriptions of the official code.

Each test re-derives a number the way the reference code computes it (written here from the
references' logic, not imported) and compares it with rlfunc:

* DrQ-v2 (facebookresearch/drqv2): ``RandomShiftsAug`` at the paper's size (84x84, pad 4) for every
  one of the 81 shifts; ``replay_buffer.ReplayBuffer._sample`` (stacked obs, n-step reward and
  discount) for every start the official code can draw, and the one named difference at a
  termination (rlfunc also samples the last ``n - 1`` starts of a terminated episode, with discount 0);
* R2D2 (Acme ``agents/jax/r2d2/learning.py`` + rlax): the whole learner loss -- burn-in of both
  networks from the stored state, double-Q selection by the online network, rlax's
  ``transformed_n_step_q_learning`` with its end-of-sequence padding, ``0.5 * sum_t td^2``, importance
  weights ``(1 / (p + 1e-6))^0.6 / max`` and priorities ``0.9 max |td| + 0.1 mean |td|`` -- value,
  priorities and gradients, in float64;
* DRQN (Hausknecht & Stone 2015): the target network unrolled over the same window from its own
  zero state, plain max target, loss on every step.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlfunc.algos import drqn, r2d2
from rlfunc.core import returns
from rlfunc.core.augment import random_shift
from rlfunc.envs.pixels import FrameStack
from rlfunc.replay.pixels import PixelReplay
from rlfunc.replay.prioritized import importance_weights

torch.set_num_threads(1)


# ----------------------------------------------------------------------------------------- DrQ-v2
def _official_random_shifts_aug(x: torch.Tensor, pad: int, shift: torch.Tensor) -> torch.Tensor:
    """drqv2.py ``RandomShiftsAug.forward`` with its ``randint`` draw given as ``shift [n, 2]`` (x, y)."""
    n, _, h, w = x.shape
    assert h == w
    x = torch.nn.functional.pad(x, (pad,) * 4, "replicate")
    eps = 1.0 / (h + 2 * pad)
    arange = torch.linspace(-1.0 + eps, 1.0 - eps, h + 2 * pad, dtype=x.dtype)[:h]
    arange = arange.unsqueeze(0).repeat(h, 1).unsqueeze(2)
    base_grid = torch.cat([arange, arange.transpose(1, 0)], dim=2).unsqueeze(0).repeat(n, 1, 1, 1)
    grid = base_grid + shift.reshape(n, 1, 1, 2).to(x.dtype) * (2.0 / (h + 2 * pad))
    return torch.nn.functional.grid_sample(x, grid, padding_mode="zeros", align_corners=False)


def test_random_shift_equals_the_official_aug_at_84x84_pad_4_for_every_shift():
    shifts = torch.stack(torch.meshgrid(torch.arange(9), torch.arange(9), indexing="ij"), -1).reshape(81, 2)
    x = torch.randint(0, 256, (81, 9, 84, 84), generator=torch.Generator().manual_seed(0)).float()
    ours = random_shift(x, 4, shifts)
    official = _official_random_shifts_aug(x, 4, shifts)
    # the official bilinear grid_sample lands on integer pixels up to float32 rounding (measured 0.0036 of 255)
    torch.testing.assert_close(ours, official, atol=1e-2, rtol=0)
    assert torch.equal(ours, official.round())  # the same integer shift, pixel for pixel


GAMMA, NSTEP, STACK = 0.9, 3, 3


def _frame(e: int, t: int) -> np.ndarray:
    f = np.zeros((1, 2, 2), np.uint8)
    f[0, 0, 0], f[0, 0, 1] = e, t
    return f


def _fill_dmc_like(replay: PixelReplay, episodes: list[tuple[int, str]]):
    """Add episodes as the trainer does and keep them the way the official ``ReplayBufferStorage``
    does: ``observation[0..L]`` (stacked), ``action[1..L]``, ``reward[1..L]``, ``discount[1..L]``
    (the env's: 0 at a termination, 1 at a time limit), index 0 the reset's dummy entries."""
    stored, starts, slot = [], [], 0
    rng = np.random.default_rng(0)
    for e, (length, end) in enumerate(episodes):
        fs = FrameStack(STACK)
        obs = fs.reset(_frame(e, 0))
        ep = {"observation": [obs], "action": [np.zeros(2, np.float32)], "reward": [0.0], "discount": [1.0]}
        for t in range(length):
            nxt = fs.push(_frame(e, t + 1))
            a = rng.uniform(-1, 1, 2).astype(np.float32)
            r = float(rng.normal() * 3)
            last = t == length - 1
            term = last and end == "term"
            replay.add(obs, a, r, nxt, term, last and end == "trunc")
            ep["observation"].append(nxt)
            ep["action"].append(a)
            ep["reward"].append(r)
            ep["discount"].append(0.0 if term else 1.0)
            obs = nxt
        stored.append({k: np.asarray(v) for k, v in ep.items()})
        starts.append(slot)
        slot += length + 1
    return stored, starts


def _official_sample(ep: dict, idx: int, nstep: int, gamma: float):
    """replay_buffer.py ``ReplayBuffer._sample`` for a given ``idx`` (in ``1 .. len - nstep + 1``)."""
    obs = ep["observation"][idx - 1]
    action = ep["action"][idx]
    next_obs = ep["observation"][idx + nstep - 1]
    reward, discount = 0.0, 1.0
    for i in range(nstep):
        reward += discount * ep["reward"][idx + i]
        discount *= ep["discount"][idx + i] * gamma
    return obs, action, reward, discount, next_obs


def test_pixel_replay_equals_the_official_n_step_sample_and_the_terminal_windows_are_the_only_extra():
    episodes = [(7, "trunc"), (6, "term"), (5, "trunc")]
    replay = PixelReplay(100, (STACK, 2, 2), 2, frame_stack=STACK, nstep=NSTEP, gamma=GAMMA)
    stored, ep_starts = _fill_dmc_like(replay, episodes)
    official_starts, extra = set(), set()
    for e, (length, end) in enumerate(episodes):
        ep = stored[e]
        # the official draw: idx = randint(0, len - nstep + 1) + 1, i.e. obs index t = idx - 1 in 0 .. len - nstep
        for idx in range(1, length - NSTEP + 2):
            g = ep_starts[e] + idx - 1
            official_starts.add(g)
            batch = replay.gather(torch.tensor([g]))
            obs, action, reward, discount, next_obs = _official_sample(ep, idx, NSTEP, GAMMA)
            assert np.array_equal(batch["obs"][0].numpy(), obs), (e, idx)
            assert np.array_equal(batch["next_obs"][0].numpy(), next_obs), (e, idx)
            np.testing.assert_allclose(batch["action"][0].numpy(), action)
            assert float(batch["reward"][0]) == pytest.approx(reward, rel=1e-5, abs=1e-5)
            assert float(batch["discount"][0]) == pytest.approx(discount, rel=1e-6)
        if end == "term":
            extra |= {ep_starts[e] + t for t in range(length - NSTEP + 1, length)}
    valid = set(np.flatnonzero(replay.valid).tolist())
    # Every official start is a start here; the only others are the last n - 1 steps of the terminated
    # episode, whose windows stop at the termination (discount 0): the named deviation (drqv2 module doc).
    assert valid == official_starts | extra
    tail = replay.gather(torch.tensor(sorted(extra)))
    assert torch.all(tail["discount"] == 0.0)


# -------------------------------------------------------------------------------------------- R2D2
def _rlax_h(x, eps=1e-3):
    return torch.sign(x) * (torch.sqrt(torch.abs(x) + 1) - 1) + eps * x


def _rlax_h_inv(x, eps=1e-3):
    z = torch.sqrt(1 + 4 * eps * (eps + 1 + torch.abs(x))) / 2 / eps - 1 / 2 / eps
    return torch.sign(x) * (z**2 - 1)


def _rlax_n_step_bootstrapped_returns(r_t, discount_t, v_t, n):
    """rlax ``multistep.n_step_bootstrapped_returns`` (lambda 1) over dim 0 of ``[T, B]``."""
    seq_len = r_t.shape[0]
    pad_size = min(n - 1, seq_len)
    targets = torch.cat([v_t[n - 1 :], v_t[-1:].repeat(pad_size, 1)])
    r_t = torch.cat([r_t, torch.zeros(n - 1, r_t.shape[1], dtype=r_t.dtype)])
    discount_t = torch.cat([discount_t, torch.ones(n - 1, r_t.shape[1], dtype=r_t.dtype)])
    for i in reversed(range(n)):
        targets = r_t[i : i + seq_len] + discount_t[i : i + seq_len] * targets
    return targets


def _rlax_transformed_n_step_q_learning(q_tm1, a_tm1, target_q_t, a_t, r_t, discount_t, n):
    """rlax ``transformed_n_step_q_learning`` with ``SIGNED_HYPERBOLIC_PAIR`` (``transform_values``:
    h^-1 on the bootstrap values, h on the returns), vmapped over the batch as Acme does."""
    v_t = torch.gather(target_q_t, -1, a_t.unsqueeze(-1)).squeeze(-1)
    target = _rlax_h(_rlax_n_step_bootstrapped_returns(r_t, discount_t, _rlax_h_inv(v_t), n)).detach()
    return target - torch.gather(q_tm1, -1, a_tm1.unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("n_step", [3, 9])  # 9 > the 6 trained steps: every return is cut at the sequence end
def test_r2d2_loss_priorities_and_gradients_equal_acme_learner_transcription(n_step):
    burn, length, B, A = 3, 6, 4, 3
    config = r2d2.Config(encoder_sizes=(8,), lstm_size=8, head_sizes=(8,), burn_in=burn, sequence_length=length,
                         sequence_period=3, n_step=n_step, burn_in_stop_gradient=False)  # Acme: gradient through burn-in
    obs_space, act_space = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(A)
    params = r2d2.init(config, obs_space, act_space, seed=0)["params"].double()
    target = r2d2.init(config, obs_space, act_space, seed=1)["params"].double()  # independent: double Q matters
    gen = torch.Generator().manual_seed(0)
    T = burn + length
    o = torch.randn(T + 1, B, 4, generator=gen, dtype=torch.float64)  # Acme's window: T + 1 observations
    action = torch.randint(A, (T, B), generator=gen)
    reward = torch.randn(T, B, generator=gen, dtype=torch.float64) * 5.0
    terminated = torch.zeros(T, B, dtype=torch.bool)
    terminated[-1, 1] = True  # a termination at the window's last step: Acme's discount 0 there
    ic = TensorDict({"h": torch.randn(B, 8, generator=gen, dtype=torch.float64) * 0.5,
                     "c": torch.randn(B, 8, generator=gen, dtype=torch.float64) * 0.5,
                     "prev_action": torch.randint(A, (B,), generator=gen),
                     "prev_reward": torch.randn(B, generator=gen, dtype=torch.float64)}, [B])
    probs = torch.tensor([0.02, 0.005, 0.011, 0.03], dtype=torch.float64)
    acme_w = (1.0 / (probs + 1e-6)) ** 0.6  # Acme: (1 / (p + 1e-6))^beta, normalised by the batch max
    acme_w = acme_w / acme_w.max()
    # the replay's weights, (N P)^-beta / max: the same up to Acme's 1e-6 (N cancels in the normalisation)
    torch.testing.assert_close(importance_weights(probs.float(), 100, 0.6).double(), acme_w, rtol=5e-4, atol=0)
    batch = TensorDict({"obs": o[:-1], "next_obs": o[1:], "action": action, "reward": reward,
                        "terminated": terminated, "mask": torch.ones(T, B, dtype=torch.bool),
                        "init_carry": ic.unsqueeze(0).expand(T, B),
                        "weight": acme_w.expand(T, B)}, [T, B])

    def acme_loss(p):
        prev_a = torch.cat([ic["prev_action"][None], action])
        prev_r = torch.cat([ic["prev_reward"][None], reward])
        start = (ic["h"], ic["c"])
        _, online_state = r2d2.q_unroll(p, o[:burn], prev_a[:burn], prev_r[:burn], start)
        _, target_state = r2d2.q_unroll(target, o[:burn], prev_a[:burn], prev_r[:burn], start)
        online_q, _ = r2d2.q_unroll(p, o[burn:], prev_a[burn:], prev_r[burn:], online_state)
        target_q, _ = r2d2.q_unroll(target, o[burn:], prev_a[burn:], prev_r[burn:], target_state)
        target_q = target_q.detach()
        selector = online_q.argmax(-1)
        discounts = config.gamma * (1.0 - terminated[burn:].double())
        td = _rlax_transformed_n_step_q_learning(online_q[:-1], action[burn:], target_q[1:], selector[1:],
                                                 reward[burn:], discounts, n_step)
        batch_loss = 0.5 * td.pow(2).sum(0)
        abs_td = td.detach().abs()
        return (acme_w * batch_loss).mean(), 0.9 * abs_td.amax(0) + 0.1 * abs_td.mean(0)

    g_ref, (l_ref, p_ref) = torch.func.grad_and_value(acme_loss, has_aux=True)(params)
    g, (value, aux) = torch.func.grad_and_value(r2d2.loss, has_aux=True)(params, target, config, batch)
    torch.testing.assert_close(value, l_ref, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(aux["priorities"], p_ref, rtol=1e-9, atol=1e-9)
    for k in g_ref.keys(include_nested=True, leaves_only=True):
        torch.testing.assert_close(g[k], g_ref[k], rtol=1e-7, atol=1e-9, msg=f"gradient {k}")


def test_rlfunc_n_step_targets_equal_rlax_without_a_mask_and_cut_at_the_last_valid_step_with_one():
    gen = torch.Generator().manual_seed(1)
    T, B, A = 7, 5, 4
    r = torch.randn(T, B, generator=gen, dtype=torch.float64) * 10
    d = 0.997 * (torch.rand(T, B, generator=gen, dtype=torch.float64) > 0.2)
    q_value = torch.randn(T, B, A, generator=gen, dtype=torch.float64) * 20
    q_sel = torch.randn(T, B, A, generator=gen, dtype=torch.float64)
    for n in (1, 2, 5, 7, 11):
        ours = returns.transformed_n_step_targets(r, d, q_value, q_sel, n)
        a = q_sel.argmax(-1)
        ref = _rlax_h(_rlax_n_step_bootstrapped_returns(r, d, _rlax_h_inv(torch.gather(q_value, -1, a[..., None])[..., 0]), n))
        torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-10)
    # With a padding mask, a valid step's return equals rlax's over the valid prefix alone.
    valid = 4
    mask = torch.zeros(T, B, dtype=torch.bool)
    mask[:valid] = True
    ours = returns.transformed_n_step_targets(r, d, q_value, q_sel, 5, mask=mask)[:valid]
    a = q_sel[:valid].argmax(-1)
    v = torch.gather(q_value[:valid], -1, a[..., None])[..., 0]
    ref = _rlax_h(_rlax_n_step_bootstrapped_returns(r[:valid], d[:valid], _rlax_h_inv(v), 5))
    torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-10)


# -------------------------------------------------------------------------------------------- DRQN
def test_drqn_target_is_a_zero_state_unroll_of_the_target_network_over_the_same_window_with_a_plain_max():
    config = drqn.Config(encoder_sizes=(8,), lstm_size=8, sequence_length=5, huber_delta=None)
    obs_space, act_space = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(3)
    params = drqn.init(config, obs_space, act_space, seed=0)["params"]
    target = drqn.init(config, obs_space, act_space, seed=1)["params"]
    gen = torch.Generator().manual_seed(2)
    T, B = 5, 4
    o = torch.randn(T + 1, B, 3, generator=gen)
    action = torch.randint(3, (T, B), generator=gen)
    reward = torch.randn(T, B, generator=gen)
    terminated = torch.zeros(T, B, dtype=torch.bool)
    terminated[2, 0] = True
    mask = torch.ones(T, B, dtype=torch.bool)
    mask[3:, 0] = False
    batch = TensorDict({"obs": o[:-1], "next_obs": o[1:], "action": action, "reward": reward,
                        "terminated": terminated, "mask": mask}, [T, B])
    value, aux = drqn.loss(params, target, config, batch)
    # the paper's update, step by step: both LSTMs start from zeros at the window's first step
    zeros = (torch.zeros(B, 8), torch.zeros(B, 8))
    q, _ = drqn.q_unroll(params, o[:-1], zeros)
    q_next = drqn.q_unroll(target, o, zeros)[0][1:]  # the target net sees o_0 .. o_{t+1}
    y = reward + config.gamma * (1.0 - terminated.float()) * q_next.max(-1).values
    td = y - torch.gather(q, -1, action[..., None])[..., 0]
    expected = (0.5 * td.pow(2))[mask].mean()  # every valid step of the window weighs the same
    torch.testing.assert_close(value, expected)
    torch.testing.assert_close(aux["td_error"], torch.where(mask, td, torch.zeros(())))
