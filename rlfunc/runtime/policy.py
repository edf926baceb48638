"""A trained agent's policy, usable without the training state.

Two ways to act:

* :meth:`Policy.predict` -- Stable-Baselines3's signature,
  ``predict(obs, state=None, episode_start=None, deterministic=True) -> (action, state)``,
  for every algorithm, except that ``deterministic`` defaults to True (SB3:
  False). The caller holds the recurrent state; the policy object
  holds none, so one policy can serve any number of envs and episodes.
* :meth:`Policy.act` -- the evaluation action with the state kept inside the
  object (:meth:`Policy.reset` at every episode start, :meth:`Policy.observe_reward`
  after every step); what ``rlfunc eval`` and the trainer's evaluations use.

Both take one observation (``obs_shape``) or a batch (``(n, *obs_shape)``) and
return actions in the env's own action space (continuous actions mapped back
from ``[-1, 1]`` to the env's bounds and clipped to them, in the bounds' dtype:
``action_dtype``; discrete actions as ``int64``).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

__all__ = ["Policy"]



class Policy:
    """A trained policy: :meth:`predict` (SB3-style, caller-held state) and :meth:`act`.

    Made by :func:`rlfunc.load` from a checkpoint or an export, or by a learner.

    **Deterministic and stochastic actions** (``deterministic=`` of
    :meth:`predict`, ``--stochastic`` of ``rlfunc eval``):

    * REDQ, SAC, RLPD: ``tanh(mean)``; stochastic: a tanh-Gaussian sample, as
      in training.
    * DrQ-v2: the actor's mean; stochastic: ``clamp(mean + sigma * noise, -1, 1)``
      with ``sigma`` the exploration schedule's final value
      (``agent.stddev_final``, the schedule at ``stddev_duration``), as the
      official ``act(eval_mode=False)`` after the schedule.
    * DQN, DRQN, R2D2: ``argmax_a Q``; stochastic: epsilon-greedy with
      ``agent.eval_epsilon`` when it is above 0, else with the exploration rate
      of one training actor at the end of training: ``eps_end`` for DQN's
      schedule, ``epsilon_base`` for the Ape-X ladder (R2D2, and DRQN's
      ``exploration: actor_ladder``).

    Stochastic actions draw from the policy's own generator; :meth:`seed` makes
    them reproducible (unseeded, it is seeded from torch's global generator at
    the first stochastic call).

    :meth:`act` (``deterministic=None``) is the *evaluation* action: the
    deterministic one, except that DQN-family policies with
    ``agent.eval_epsilon > 0`` act epsilon-greedily with it (DQN's evaluation
    protocol), exactly as the trainer's evaluations do.
    """

    def __init__(
        self,
        algo_name: str,
        params: TensorDict,
        config: Any,
        action_low: np.ndarray | None,
        action_high: np.ndarray | None,
        obs_shape: tuple[int, ...],
        device: str = "cpu",
        action_dtype: Any = None,
    ) -> None:
        from rlfunc.runtime.registry import get_algo

        self.algo_name = algo_name
        self.entry = get_algo(algo_name)
        self.params = params.to(device)
        self.config = config
        self.device = torch.device(device)
        # the bounds kept exactly, in the action space's own dtype (``action_dtype``, else the bounds' float dtype,
        # else float32): a float64 space's -0.1 stored as float32 was -0.10000000149, outside the space
        self.action_dtype = None if action_low is None else _float_dtype(action_low, action_dtype)
        self.action_low = None if action_low is None else np.asarray(action_low, dtype=self.action_dtype)
        self.action_high = None if action_high is None else np.asarray(action_high, dtype=self.action_dtype)
        self.obs_shape = tuple(obs_shape)
        self._carry = None
        self._generator: torch.Generator | None = None
        self._warned_reward = False
        self._configs: dict[bool, Any] = {}

    # -- what kind of policy --------------------------------------------------------------
    @property
    def _q_learning(self) -> bool:
        return hasattr(self.entry.algo, "greedy_action")

    @property
    def recurrent(self) -> bool:
        """True when the policy carries state between steps (DRQN, R2D2; not DQN's memory-less core)."""
        return self._q_learning and hasattr(self.entry.algo, "initial_carry") and "fc" not in self.params.keys()

    @property
    def takes_reward(self) -> bool:
        """True when the network's input includes the previous reward (R2D2 with ``reward_input``)."""
        return (
            self.recurrent
            and hasattr(self.entry.algo, "prepare_carry")
            and bool(getattr(self.config, "reward_input", False))
        )

    # -- randomness -------------------------------------------------------------------------
    def seed(self, seed: int) -> Policy:
        """Seed the generator of stochastic actions (returns the policy). ``seed``: an integer from 0 to
        2**64 - 1 (a bool, float or string is one ``ValueError`` sentence, not truncated)."""
        seed = _check_int(seed, "seed", 0, 2**64 - 1)
        self._generator = torch.Generator(device=self.device).manual_seed(seed)
        return self

    def _gen(self) -> torch.Generator:
        if self._generator is None:
            self.seed(int(torch.randint(0, 2**62, ()).item()))
        return self._generator

    # -- the internal state of act() --------------------------------------------------------
    def reset(self, num_envs: int = 1) -> None:
        """Forget recurrent state (no-op for feed-forward policies)."""
        num_envs = _check_int(num_envs, "num_envs", 1)
        init_carry = getattr(self.entry.algo, "initial_carry", None)
        self._carry = None if init_carry is None else init_carry(self.config, num_envs, device=self.device)

    def observe_reward(self, reward) -> None:
        """Give a recurrent policy the reward its last action earned (one per env).

        Agents whose network takes the previous reward as an input (R2D2's
        ``reward_input``; algorithm modules with ``prepare_carry``) write it into
        their carry, so evaluation feeds the network what training fed it.
        :func:`rlfunc.runtime.evaluate.run_episodes` calls this after every
        step; a caller that never does leaves the previous reward at 0. A no-op
        for every other policy. (:meth:`predict` takes the reward as its
        ``reward=`` argument instead.)
        """
        prepare = getattr(self.entry.algo, "prepare_carry", None)
        if prepare is None or self._carry is None:
            return
        r = torch.as_tensor(np.asarray(reward, dtype=np.float32), device=self.device).reshape(-1)
        self._carry = prepare(self._carry, prev_reward=r)

    # -- shapes -----------------------------------------------------------------------------
    def _batch(self, obs) -> tuple[np.ndarray, bool]:
        """``obs`` as a batch ``[n, *obs_shape]`` and whether it was one observation (a torch tensor,
        on any device and requiring grad or not, is taken as its values)."""
        if isinstance(obs, torch.Tensor):
            if obs.is_meta:
                raise ValueError(
                    "Observation is a tensor on the meta device, which holds no values; pass the env's observation."
                )
            if obs.is_floating_point() and obs.dtype not in (torch.float32, torch.float64):
                obs = obs.float()  # bfloat16 / float16: numpy has no bfloat16; the network takes float32 anyway
            obs = obs.detach().cpu().numpy()
        try:
            obs = np.asarray(obs)
        except (TypeError, ValueError):  # ragged nested lists
            raise ValueError(
                f"Observation is not an array of numbers (its nested lists differ in length) and does not fit this "
                f"{self.algo_name} policy; pass a numpy array of shape {self.obs_shape} or a batch of them."
            ) from None
        if obs.dtype.kind not in "biuf":
            raise ValueError(
                f"Observation of dtype {obs.dtype} does not fit this {self.algo_name} policy; pass numbers "
                "(a numpy array or tensor of floats or integers, as the env returns them)."
            )
        finite = np.isfinite(obs) if obs.dtype.kind == "f" else None
        if finite is not None and not finite.all():  # the network would answer NaN actions
            raise ValueError(
                f"Observation holds {int(finite.size - finite.sum())} NaN or infinite value(s), which this "
                f"{self.algo_name} policy would turn into NaN actions; pass finite observations (check the env and its wrappers)."
            )
        if obs.dtype.kind == "f" and obs.dtype.itemsize > 4:  # a finite float64 such as 1e39 is inf in float32
            with np.errstate(over="ignore"):
                beyond = int(obs.size - np.isfinite(obs.astype(np.float32)).sum())
            if beyond:
                raise ValueError(
                    f"Observation holds {beyond} value(s) beyond float32's range (magnitude above "
                    f"{float(np.finfo(np.float32).max):.4g}), which this {self.algo_name} policy would turn into NaN "
                    "actions; pass observations within float32's range (check the env and its wrappers)."
                )
        if obs.shape == self.obs_shape:
            return obs[None], True
        if obs.ndim == len(self.obs_shape) + 1 and obs.shape[1:] == self.obs_shape and obs.shape[0] > 0:
            return obs, False
        expected = ", ".join(str(d) for d in self.obs_shape)
        raise ValueError(
            f"Observation of shape {tuple(obs.shape)} does not fit this {self.algo_name} policy, which expects "
            f"shape ({expected}{',' if len(self.obs_shape) == 1 else ''}) or a batch (n, {expected}); "
            "pass observations of the env it was trained on, with the same wrappers."
        )

    # -- one step ---------------------------------------------------------------------------
    def _q_config(self, deterministic: bool | None):
        """The algorithm config whose ``eval_epsilon`` gives the wanted DQN-family action."""
        if deterministic is None:
            return self.config
        if deterministic not in self._configs:
            eps = 0.0 if deterministic else self.exploration_epsilon()
            self._configs[deterministic] = dataclasses.replace(self.config, eval_epsilon=float(eps))
        return self._configs[deterministic]

    def exploration_epsilon(self) -> float:
        """The epsilon of DQN-family stochastic actions (see the class docstring)."""
        eps = float(getattr(self.config, "eval_epsilon", 0.0))
        if eps > 0.0:
            return eps
        if getattr(self.config, "exploration", "actor_ladder") == "schedule":
            return float(self.config.eps_end)
        from rlfunc.core.exploration import actor_epsilons

        return float(actor_epsilons(1, self.config.epsilon_base, self.config.epsilon_alpha)[0])

    def _forward(self, obs_t: torch.Tensor, carry, deterministic: bool | None):
        """Normalized actions ``[n, ...]`` (tensor) and the next carry."""
        algo = self.entry.algo
        n = obs_t.shape[0]
        if self._q_learning:
            if carry is None:
                carry = algo.initial_carry(self.config, n, device=self.device)
            if deterministic is None:  # the evaluation action, called as the trainer always has
                # with agent.eval_epsilon > 0 its random actions come from this policy's generator (seeded by
                # run_episodes), not torch's global one: the same seed evaluates the same
                if float(getattr(self.config, "eval_epsilon", 0.0)) > 0:
                    noise = algo.draw_act_noise(n, generator=self._gen(), device=self.device)
                    return algo.greedy_action(self.params, obs_t, carry, config=self.config, noise=noise)
                return algo.greedy_action(self.params, obs_t, carry, config=self.config)
            noise = None if deterministic else algo.draw_act_noise(n, generator=self._gen(), device=self.device)
            return algo.greedy_action(self.params, obs_t, carry, config=self._q_config(deterministic), noise=noise)
        if deterministic is None or deterministic:
            return algo.act(self.params, obs_t, deterministic=True, config=self.config), None
        if self.action_low is None:
            raise ValueError(f"This {self.algo_name} policy has no action bounds, so it cannot sample actions.")
        noise = torch.randn((n, self.action_low.shape[0]), generator=self._gen(), device=self.device)
        kwargs = {"step": self.config.stddev_duration} if hasattr(self.config, "stddev_duration") else {}
        return algo.act(self.params, obs_t, noise, deterministic=False, config=self.config, **kwargs), None

    def _native(self, a: np.ndarray) -> np.ndarray:
        if self.action_low is not None and np.issubdtype(a.dtype, np.floating):
            # computed in the space's dtype (at least float32, float32 arithmetic for a float32 space as before)
            work = np.promote_types(self.action_dtype, np.float32)
            low, high = self.action_low.astype(work), self.action_high.astype(work)
            a = low + (a.astype(work) + 1.0) * 0.5 * (high - low)
            # rounding can put a saturated action (+-1) one ulp outside bounds such as [-4.8, 0.09]: clipped to
            # the exact bounds, then returned in the space's dtype (its bounds are exact in it, and rounding is
            # monotonic, so the cast stays inside), as the training env's rescaling clips what the policy sends
            a = np.clip(a, low, high).astype(self.action_dtype)
        return a

    @property
    def stateless(self) -> bool:
        """True when an action depends on the current observation alone (the actor-critic policies:
        REDQ, SAC, RLPD, DrQ-v2), so :meth:`action_tensor` needs no :meth:`reset` between episodes."""
        return not self._q_learning

    def action_tensor(self, obs_t: torch.Tensor) -> torch.Tensor:
        """The evaluation action (normalised, ``[n, ...]``) of a stateless policy for observations already
        on its device (``[n, *obs_shape]``, float32), left on the device: :meth:`act_normalized`'s action
        without its host copy, bit for bit, for callers that copy many policies' actions at once (a
        population's evaluation, :func:`rlfunc.runtime.evaluate.run_episodes_together`)."""
        if not self.stateless:
            raise ValueError(f"This {self.algo_name} policy keeps state between steps; use act_normalized().")
        return self._forward(obs_t, None, None)[0]

    # -- act(): evaluation with internal state ----------------------------------------------
    def act_normalized(self, obs: np.ndarray, deterministic: bool | None = None) -> np.ndarray:
        """Action in the training env's (rescaled, ``[-1, 1]``) action space; state kept inside.

        ``deterministic``: ``None`` the evaluation action, ``True`` the
        deterministic one, ``False`` a sample (see the class docstring).
        """
        if deterministic is not None:
            deterministic = _check_bool(deterministic, "deterministic", "None, True or False")
        batch, single = self._batch(obs)
        obs_t = torch.as_tensor(batch, dtype=torch.float32, device=self.device)
        if self._q_learning and (self._carry is None or self._carry[0].shape[0] != batch.shape[0]):
            self.reset(batch.shape[0])
        action, carry = self._forward(obs_t, self._carry, deterministic)
        if self._q_learning:
            self._carry = carry
        out = action.cpu().numpy()
        return out[0] if single else out

    def act(self, obs: np.ndarray, deterministic: bool | None = None) -> np.ndarray:
        """Action in the env's native action space (bounds restored); state kept inside.

        Call :meth:`reset` at every episode start and, for R2D2,
        :meth:`observe_reward` after every step.
        """
        return self._native(self.act_normalized(obs, deterministic))

    # -- predict(): SB3's signature, caller-held state --------------------------------------
    def initial_state(self, num_envs: int = 1) -> tuple[np.ndarray, ...] | None:
        """The recurrent state at an episode start for ``num_envs`` envs (``None`` for feed-forward policies)."""
        num_envs = _check_int(num_envs, "num_envs", 1)
        if not self.recurrent:
            return None
        return tuple(t.cpu().numpy() for t in self.entry.algo.initial_carry(self.config, num_envs, device="cpu"))

    def _carry_from_state(self, state, n: int):
        template = self.entry.algo.initial_carry(self.config, n, device=self.device)
        if state is None:
            return template
        fields = getattr(template, "_fields", ())  # R2D2's Carry names its previous actions
        if not isinstance(state, (tuple, list)) or len(state) != len(template):
            raise ValueError(
                f"state must be the tuple of {len(template)} arrays this {self.algo_name} policy's predict() "
                f"returned (or None at the start), got {type(state).__name__}."
            )
        parts = []
        for i, (given, want) in enumerate(zip(state, template)):
            if isinstance(given, torch.Tensor):
                given = given.detach().cpu()
            try:
                given = np.asarray(given)
            except (TypeError, ValueError):
                given = np.asarray(None)
            if given.dtype.kind not in "biuf":
                raise ValueError(
                    f"state[{i}] is not an array of numbers ({given.dtype}); pass the state predict() returned."
                )
            t = torch.as_tensor(given, device=self.device)
            if tuple(t.shape) != tuple(want.shape):
                raise ValueError(
                    f"state[{i}] has shape {tuple(t.shape)}, but {n} observation(s) need {tuple(want.shape)}; "
                    "pass the state predict() returned for the same number of envs."
                )
            if given.dtype.kind == "f" and not np.isfinite(given).all():
                raise ValueError(
                    f"state[{i}] holds NaN or infinite values, which would give NaN actions; pass the state predict() "
                    "returned (or None at an episode start)."
                )
            if fields and fields[i] == "prev_action":  # out of range (or 1.5) was a silent all-zero one-hot (or 1)
                num_actions = self.entry.algo._num_actions(self.params)
                whole = given == np.floor(given) if given.dtype.kind == "f" else True
                bad = given[(given < 0) | (given >= num_actions) | ~np.asarray(whole)]
                if bad.size:
                    raise ValueError(
                        f"state[{i}] holds the previous actions, which must be action indices from 0 to "
                        f"{num_actions - 1}, got {bad.reshape(-1)[:5].tolist()}; pass the state predict() returned."
                    )
            parts.append(t.to(want.dtype))
        return _rebuild(template, parts)

    def predict(
        self,
        observation: np.ndarray,
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = True,
        *,
        reward: np.ndarray | float | None = None,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """Stable-Baselines3's ``predict``: ``(action, state)`` for one observation or a batch.

        ``observation``: ``obs_shape`` or ``(n, *obs_shape)`` (another shape is a
        ``ValueError`` naming the expected one; so is a NaN or infinite value, or one beyond float32's range).
        ``action``: in the env's own action space, ``(A,)`` / ``(n, A)`` floats of ``action_dtype`` or an int64
        scalar / ``(n,)``.

        ``state``: ``None`` for feed-forward policies (always returned as
        ``None``). For recurrent ones (DRQN; R2D2) it is a tuple of numpy
        arrays with a leading env dimension ``n`` -- ``(h, c)``, or R2D2's
        ``(h, c, prev_action, prev_reward)`` -- ``None`` meaning "every episode
        starts here". Pass back what the previous call returned.

        ``episode_start``: ``(n,)`` booleans (or one bool), True where the
        observation is the first of an episode; those envs' state is zeroed
        first (LSTM state, previous action and reward).

        ``deterministic``: True (default) for the deterministic action, False
        for the algorithm's own exploration (see the class docstring).

        Differences from Stable-Baselines3: ``deterministic`` defaults to True
        (SB3: False; pass ``deterministic=False`` for SB3's default sampling)
        and must be a bool; the state is a tuple of ``(n, ...)`` arrays, not
        RecurrentPPO's ``(layers, n, hidden)``, so treat it as opaque; a
        discrete action for one observation is a numpy ``int64`` scalar (SB3: a
        0-d array); images are taken only in the layout of the env the policy
        was trained on (rlfunc's pixel envs give ``(C, H, W)`` uint8: an
        ``(H, W, C)`` frame is a ``ValueError``, not transposed as SB3's
        ``VecTransposeImage`` does); continuous actions are clipped to the
        env's bounds; ``reward=`` is an addition.

        ``reward``: R2D2's network takes the reward of the previous step as an
        input, so pass the reward each env got from its previous action
        (``(n,)`` or a float) with the next observation:
        ``predict(obs, state, episode_start, reward=reward)``. It is written
        into ``state`` before acting and ignored where ``episode_start`` is
        True or when ``state`` is None (an episode start: the previous reward
        is 0, as in training); for every other policy it is accepted and ignored. An R2D2
        policy with ``reward_input`` that is continued without it warns once
        and keeps the previous reward at 0.
        """
        deterministic = _check_bool(deterministic, "deterministic", "True or False")
        batch, single = self._batch(observation)
        n = batch.shape[0]
        obs_t = torch.as_tensor(batch, dtype=torch.float32, device=self.device)
        start = None
        if episode_start is not None:
            start_np = _episode_starts(episode_start)
            if start_np.shape != (n,):
                raise ValueError(
                    f"episode_start has {start_np.size} entries for {n} observation(s); pass one bool per env."
                )
            start = torch.as_tensor(start_np, device=self.device)
        if not self.recurrent:
            action, _ = self._forward(obs_t, None, deterministic)
            out = action.cpu().numpy()
            return self._native(out[0] if single else out), None
        carry = self._carry_from_state(state, n)
        algo = self.entry.algo
        if reward is not None and hasattr(algo, "prepare_carry"):
            try:
                r = np.asarray(reward, dtype=np.float32).reshape(-1)
            except (TypeError, ValueError):
                raise ValueError(
                    f"reward must be a number or one number per env, got {reward!r}; pass the rewards the env returned."
                ) from None
            if r.shape != (n,):
                raise ValueError(f"reward has {r.size} entries for {n} observation(s); pass one reward per env.")
            if not np.isfinite(r).all():
                raise ValueError(f"reward must be finite, got {reward!r}; pass the rewards the env returned.")
            if state is not None:  # state None: every episode starts, its previous reward is 0
                carry = algo.prepare_carry(carry, prev_reward=torch.as_tensor(r, device=self.device))
        elif self.takes_reward and state is not None and not (start is not None and bool(start.all())):
            if not self._warned_reward:
                warnings.warn(
                    f"This {self.algo_name} policy's network takes the previous reward; pass it as "
                    "predict(obs, state, episode_start, reward=reward) (the previous reward stays 0 without it).",
                    stacklevel=2,
                )
                self._warned_reward = True
        if start is not None:
            fresh = algo.initial_carry(self.config, n, device=self.device)
            carry = _rebuild(
                carry, [torch.where(start.reshape(-1, *([1] * (c.dim() - 1))), f, c) for c, f in zip(carry, fresh)]
            )
        action, carry = self._forward(obs_t, carry, deterministic)
        out = action.cpu().numpy()
        new_state = tuple(t.cpu().numpy() for t in carry)
        return self._native(out[0] if single else out), new_state


def _float_dtype(bounds, given) -> np.dtype:
    """The dtype of a Box action space's actions: ``given`` (the space's dtype), else the bounds' own float
    dtype (a space's ``low`` has its dtype), else float32 (integer or list bounds)."""
    dtype = np.dtype(given) if given is not None else getattr(bounds, "dtype", None)
    if dtype is None or not np.issubdtype(dtype, np.floating):
        return np.dtype(np.float32)
    return np.dtype(dtype)


def _check_int(value, name: str, low: int, high: int | None = None) -> int:
    """``value`` as an int (numpy and 0-d integer tensors too) within ``[low, high]``, else one ``ValueError``
    sentence: a bool, a float such as ``1.5`` or a string would be truncated or fail deep inside torch."""
    if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_floating_point() and value.dtype != torch.bool:
        value = int(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}.")
    value = int(value)
    if value < low or (high is not None and value > high):
        span = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise ValueError(f"{name} must be an integer {span}, got {value}.")
    return value


def _check_bool(value, name: str, allowed: str) -> bool:
    """``value`` as a bool (a numpy bool too), else one ``ValueError`` sentence: ``1``, ``0.0`` or ``"no"``
    would be read as its truth value, ``"no"`` as True."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ValueError(f"{name} must be {allowed}, got {value!r}.")


def _episode_starts(episode_start) -> np.ndarray:
    """``episode_start`` as a flat bool array: bools, or numbers that are 0 or 1 (a VecEnv's ``dones`` as
    floats); anything else (``"no"``, ``2.5``) is one ``ValueError`` sentence, not its truth value."""
    if isinstance(episode_start, torch.Tensor):
        episode_start = episode_start.detach().cpu().numpy()
    try:
        arr = np.asarray(episode_start)
    except (TypeError, ValueError):
        arr = np.asarray(None)
    if arr.dtype.kind == "b":
        return arr.reshape(-1)
    if arr.dtype.kind in "iuf" and np.all((arr == 0) | (arr == 1)):
        return arr.astype(bool).reshape(-1)
    raise ValueError(
        f"episode_start must be one bool per env (True where an episode starts), got {episode_start!r}."
    )


def _rebuild(like, parts: list[torch.Tensor]):
    """``parts`` in the carry type of ``like`` (a NamedTuple such as R2D2's ``Carry``, or a plain tuple)."""
    return type(like)(*parts) if hasattr(like, "_fields") else tuple(parts)
