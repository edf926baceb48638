"""The learner protocol, the update a learner calls, and :class:`TransitionLearner` (REDQ, SAC).

See :mod:`rlfunc.runtime.learners` for what every learner exposes.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rlfunc.replay.uniform import UniformReplay
from rlfunc.runtime.config import ConfigError
from rlfunc.runtime.memory import Need, network_need, require_memory
from rlfunc.runtime.perf import allow_recompiles
from rlfunc.runtime.policy import Policy

__all__ = ["TransitionLearner", "compiled_update", "learner_update"]


def compiled_update(algo, train_cfg):
    """The algorithm's ``update``, compiled as ``train.compile``/``train.compile_mode`` ask.

    Algorithms with a ``make_update(mode)`` (REDQ, SAC, RLPD) may compile per
    step (``"step"``: graphs independent of the number of updates per env
    step) or whole (``"full"``); others compile ``update`` whole.
    """
    if not train_cfg.compile:
        return algo.update
    allow_recompiles()  # a process may train many configs (a sweep's worker, benchmarks/run.py learn)
    if hasattr(algo, "make_update"):
        return algo.make_update(train_cfg.compile_mode)
    return torch.compile(algo.update, fullgraph=True)


def learner_update(algo, train_cfg, state: TensorDict):
    """What a learner calls as ``update``: :func:`compiled_update`, and with
    ``train.cuda_graph`` that update behind
    :class:`~rlfunc.runtime.graphs.FixedStateUpdate` (state at fixed addresses,
    recorded and replayed as a CUDA graph; eager with one warning if capture
    fails). The learner keeps calling ``self.state, metrics =
    self._update(self.state, batch[, noise])``.
    """
    update = compiled_update(algo, train_cfg)
    if getattr(train_cfg, "cuda_graph", False):
        from rlfunc.runtime.graphs import FixedStateUpdate

        return FixedStateUpdate(update, state, cuda_graph=True)
    return update


def _fixed_state(update, state: TensorDict) -> TensorDict:
    """The wrapper's own (fixed-address) state when ``update`` is a FixedStateUpdate, else ``state``."""
    from rlfunc.runtime.graphs import FixedStateUpdate

    return update.state if isinstance(update, FixedStateUpdate) else state


def _generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(int(seed))


def check_warmup(train_cfg, holds: int, holds_text: str) -> None:
    """``train.learning_starts`` (in env steps) fits the run and the replay.

    ``learning_starts > train.total_steps``: the run ends before the first
    update. ``learning_starts > holds`` (the env steps the replay keeps,
    described by ``holds_text``): the warm-up's first data are overwritten
    before anything learns from them. Both are one
    :class:`~rlfunc.runtime.config.ConfigError` sentence.
    """
    warmup, total = train_cfg.learning_starts, train_cfg.total_steps
    if warmup > total:
        raise ConfigError(
            f"train.learning_starts={warmup} is more than train.total_steps={total}: the run would end before "
            "learning starts; lower train.learning_starts or raise train.total_steps."
        )
    if warmup > holds:
        raise ConfigError(
            f"train.learning_starts={warmup} is more than the replay holds ({holds_text}): its first data would be "
            "overwritten before learning starts; lower train.learning_starts or raise train.replay_size."
        )


def _numel(space: gym.Space) -> int:
    return int(np.prod(space.shape)) if getattr(space, "shape", None) else 1


class TransitionLearner:
    """Off-policy learning from uniformly replayed transitions (REDQ, SAC).

    Each call of :meth:`learn` draws ``G * B`` rows at once (``G =
    agent.updates_per_step``), reshapes them to ``[G, B]`` and runs one pure
    ``update`` over them: one environment step's worth of learning.
    """

    learning_starts_unit = "env steps"
    """What ``train.learning_starts`` counts for this learner (in config messages)."""
    replay_size_unit = "transitions"
    """What ``train.replay_size`` counts for this learner (in config messages)."""
    ready_reads_updates = False
    """Whether :meth:`ready` depends on how many updates this learner has run (R2D2's rate
    limiter). When it does not, a vmapped population may run a round's due updates together
    after counting them (:meth:`rlfunc.runtime.population.PopulationTrainer.run`)."""

    @classmethod
    def check_run_config(cls, run_config) -> None:
        """Checks across config sections that need no env (called by
        :func:`~rlfunc.runtime.config.build_config`): here, the uniform-random warm-up
        ``train.learning_starts`` fits ``train.total_steps`` and ``train.replay_size``."""
        t = run_config.train
        check_warmup(t, t.replay_size, f"train.replay_size={t.replay_size} transitions")

    def _bind(self, entry, run_config, obs_space: gym.Space, act_space: gym.Space) -> None:
        """What every learner keeps: the registry entry, algorithm, agent and train configs, device, spaces."""
        if getattr(run_config.train, "population", None) is not None:
            raise ConfigError(
                "train.population is set: a population trains with `rlfunc train`, rlfunc.train or "
                "rlfunc.runtime.population.train, not with the single-run Trainer."
            )
        self.entry = entry
        self.algo = entry.algo
        self.env_id = run_config.env.id
        # What depends on the environment (REDQ's "mbpo" target entropy), resolved before init.
        for_env = getattr(self.algo, "config_for_env", None)
        self.config = run_config.agent if for_env is None else for_env(run_config.agent, self.env_id)
        self.train_cfg = run_config.train
        self.device = torch.device(self.train_cfg.device)
        self.obs_space, self.act_space = obs_space, act_space

    def _replay_need(self) -> Need:
        """Bytes of the replay this learner allocates (a ``UniformReplay`` of float32 transitions)."""
        per = 4 * (2 * _numel(self.obs_space) + _numel(self.act_space) + 2)  # obs, next_obs, action, reward, terminated
        cap = self.train_cfg.replay_size
        return Need(
            f"train.replay_size={cap}", cap * per, f"the replay of {self.env_id} transitions ({per} bytes each)",
            "lower train.replay_size",
        )

    def _sampled_rows(self) -> tuple[int, int]:
        """``(rows one update samples, bytes of each as the update reads it)``: ``agent.updates_per_step``
        x ``agent.batch_size`` float32 transitions (obs, next obs, action, reward, terminated)."""
        updates = int(getattr(self.config, "updates_per_step", 1))
        per = 4 * (2 * _numel(self.obs_space) + _numel(self.act_space) + 2)
        return int(getattr(self.config, "batch_size", 1)) * max(updates, 1), per

    def _batch_need(self) -> Need:
        """The :class:`Need` of one update's sampled batch: a typo such as ``agent.batch_size=1e12`` is one
        sentence before training, not an out-of-memory crash at the first update after the warm-up."""
        rows, per = self._sampled_rows()
        updates = int(getattr(self.config, "updates_per_step", 1))
        keys = ["agent.batch_size"] + (["agent.updates_per_step"] if updates > 1 else [])
        subject = " x ".join(f"{k}={getattr(self.config, k.removeprefix('agent.'))}" for k in keys)
        return Need(subject, rows * per, f"each update's sampled batch ({rows} rows of {per} bytes)",
                    "lower " + " or ".join(keys))

    def _data_needs(self) -> tuple[list[Need], list[Need]]:
        """``(host needs, device needs)`` of what this learner loads besides its replay and state (none
        here; RLPD's prior dataset): the host memory loading takes, and what then moves to a device that is
        not the CPU (nothing on the CPU). On the CPU the host needs are checked with the replay; on another
        device the device needs are, and the host needs against the host's own memory."""
        return [], []

    def _check_memory(self) -> None:
        """Before anything is allocated: the algorithm state, the replay, what the learner loads
        (:meth:`_data_needs`) and one update's working memory (:meth:`_batch_need`) fit in the device's
        memory (:func:`rlfunc.runtime.memory.require_memory`; one sentence with the bytes if not)."""
        state = network_need(self.algo, self.config, self.obs_space, self.act_space)  # first: init's space checks
        needs = [self._replay_need(), state]
        host, on_device = self._data_needs()
        needs += host + on_device if self.device.type == "cpu" else on_device
        batch = self._batch_need()
        # A batch under 1% of the rest cannot decide whether the run fits; naming it would point at the wrong key.
        if batch.nbytes >= 0.01 * sum(n.nbytes for n in needs if n is not None):
            needs.append(batch)
        if self.device.type != "cpu":
            require_memory(host, "cpu")
        require_memory(needs, self.device)

    def __init__(self, entry, run_config, obs_space: gym.Space, act_space: gym.Space) -> None:
        self._bind(entry, run_config, obs_space, act_space)
        self._check_memory()
        seed = self.train_cfg.seed
        self.state = self.algo.init(self.config, obs_space, act_space, seed=seed, device=self.device)
        self.replay = UniformReplay(self.train_cfg.replay_size, device=self.device)
        self.generator = _generator(self.device, seed + 1)
        self.act_dim = int(np.prod(act_space.shape))
        self._update = learner_update(self.algo, self.train_cfg, self.state)
        self.state = _fixed_state(self._update, self.state)

    # -- acting -------------------------------------------------------------
    # explore = act_outputs(act_fn(params, *act_inputs(...))): the halves around the pure act are
    # the learner's (its generator, carries, schedules); a population (rlfunc.runtime.population)
    # calls each member's halves and one vmapped act_fn over the stacked parameters.
    def act_inputs(self, obs: np.ndarray, env_step: int, episode_start: np.ndarray | None = None):
        """What :meth:`act_fn` takes after the parameters, drawn from this learner's generator, or the
        actions themselves (a numpy array) where no network acts (the uniform warm-up)."""
        n = obs.shape[0]
        if env_step < self.train_cfg.learning_starts:
            a = torch.rand((n, self.act_dim), generator=self.generator, device=self.device) * 2.0 - 1.0
            return a.cpu().numpy()
        obs_t = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
        noise = torch.randn((n, self.act_dim), generator=self.generator, device=self.device)
        return obs_t, noise

    def act_fn(self, params: TensorDict, obs: torch.Tensor, noise: torch.Tensor):
        """The pure acting call (tensors in, tensors out; vmappable over members)."""
        return self.algo.act(params, obs, noise, config=self.config)

    def act_outputs(self, out) -> np.ndarray:
        """The env's actions from :meth:`act_fn`'s result (recurrent learners keep their carry here)."""
        return out.cpu().numpy()

    def population_act_inputs(self, learners: list, obs: np.ndarray, env_steps: list[int]) -> tuple | None:
        """Every member's :meth:`act_inputs` at once, stacked ``[P, ...]`` (``obs``: ``[P, num_envs, ...]``,
        row ``k`` member ``k``'s, whose learner is ``learners[k]``): the observations moved to the device in
        one copy, each member's noise drawn from its own generator as its ``act_inputs`` draws it. ``None``
        where this learner's ``act_inputs`` has no such form or a member is still in its uniform warm-up
        (the population then calls each member's)."""
        if type(self).act_inputs is not TransitionLearner.act_inputs or any(
            step < lr.train_cfg.learning_starts for lr, step in zip(learners, env_steps)
        ):
            return None
        obs_t = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
        n = obs.shape[1]
        noise = [torch.randn((n, lr.act_dim), generator=lr.generator, device=lr.device) for lr in learners]
        return obs_t, torch.stack(noise)

    def population_act_outputs(self, out) -> list[np.ndarray] | None:
        """Every member's :meth:`act_outputs` from a vmapped :meth:`act_fn`'s result ``[P, ...]`` with one
        copy to the host; ``None`` where this learner's ``act_outputs`` does more (a recurrent carry)."""
        if type(self).act_outputs is not TransitionLearner.act_outputs:
            return None
        return list(out.cpu().numpy())

    def explore(self, obs: np.ndarray, env_step: int, episode_start: np.ndarray | None = None) -> np.ndarray:
        inputs = self.act_inputs(obs, env_step, episode_start)
        if isinstance(inputs, np.ndarray):
            return inputs
        return self.act_outputs(self.act_fn(self.state["params"], *inputs))

    def observe(self, rows: TensorDict) -> None:
        self.replay.add(self._stored(rows))

    @staticmethod
    def _stored(rows: TensorDict) -> TensorDict:
        """What the replay keeps of a collector's rows."""
        return TensorDict(
            {
                "obs": rows["obs"].float(),
                "action": rows["action"].float(),
                "reward": rows["reward"].float(),
                "next_obs": rows["next_obs"].float(),
                "terminated": rows["terminated"].float(),
            },
            batch_size=rows.batch_size,
        )

    def population_observe(self, replay, rows: TensorDict, counts: list[int]) -> bool:
        """Every member's rows into :meth:`population_replay`'s ``replay`` at once (``rows`` member-major,
        ``counts[k]`` of them member ``k``'s): what each member's :meth:`observe` of its own rows stores,
        in one write. ``False`` (nothing stored) where this learner's ``observe`` does more than store
        its rows: the population then calls each member's."""
        if type(self).observe is not TransitionLearner.observe:
            return False
        replay.add_rows(counts, self._stored(rows))
        return True

    # -- learning -----------------------------------------------------------
    def ready(self, env_step: int) -> bool:
        return env_step >= self.train_cfg.learning_starts and len(self.replay) >= 1

    def sample_batch(self) -> TensorDict:
        g, b = self.config.updates_per_step, self.config.batch_size
        return self.replay.sample(g * b, generator=self.generator).reshape(g, b)

    # learn = after_update(update(prepare_state(state), *update_inputs())): the halves around the
    # pure update are the learner's; a population calls each member's halves and one vmapped update.
    def prepare_state(self, state: TensorDict) -> None:
        """Write into ``state`` (in place) what the update reads from the runtime (none here)."""

    def update_inputs(self, rows: TensorDict | None = None) -> tuple[tuple, Any]:
        """``(arguments of update after the state, context for after_update)``: the batch and the
        update's noise, drawn from this learner's replay and generator. ``rows``: this learner's
        rows already drawn with its generator from a batched replay (:meth:`population_sample`)."""
        batch = self.sample_batch() if rows is None else rows
        g, b = batch.batch_size
        return (batch, self.update_noise(g, b)), None

    def update_noise(self, g: int, b: int) -> TensorDict:
        """The update's noise for a ``[g, b]`` batch, from this learner's generator."""
        return self.algo.draw_noise(self.config, g, b, self.act_dim, generator=self.generator, device=self.device)

    def population_update_inputs(self, learners: list, rows: TensorDict) -> tuple[tuple, list] | None:
        """Every member's :meth:`update_inputs` at once, when all of them learn from ``rows`` (``[P, ...]``,
        :meth:`population_sample`'s, row ``k`` member ``k``'s; ``learners[k]`` is member ``k``'s learner):
        ``(arguments stacked [P, ...], contexts)``, what stacking ``learners[k].update_inputs(rows[k])``
        gives without splitting and restacking the batch; ``None`` where this learner's
        ``update_inputs`` has no such form (the population then calls each member's)."""
        if type(self).update_inputs is not TransitionLearner.update_inputs:
            return None
        from rlfunc.core.population import unsqueeze0

        g, b = rows.batch_size[1:3]
        noise = [lr.update_noise(g, b) for lr in learners]
        return (rows, unsqueeze0(noise[0]) if len(noise) == 1 else torch.stack(noise)), [None] * len(learners)

    # A population of this learner may keep every member's replay in one batched replay: member k's
    # learner then holds the batched replay's member(k) (its single replay, bound to row k) and the
    # population draws every member's rows with one call. None: each member keeps its own replay.
    def population_replay(self, members: int):
        """A replay batched over ``members`` whose ``member(k)`` stands in for this learner's replay
        (:meth:`use_replay`), or ``None``: here a :class:`~rlfunc.replay.population.PopulationReplay`."""
        if type(self.replay) is not UniformReplay:
            return None
        from rlfunc.replay.population import PopulationReplay

        return PopulationReplay(members, self.replay.capacity, device=self.device)

    def use_replay(self, replay) -> None:
        """Store into and sample from ``replay`` (a batched replay's ``member(k)``) from now on."""
        self.replay = replay

    def population_sample(self, replay, generators) -> TensorDict:
        """Every member's rows ``[P, ...]`` from :meth:`population_replay`'s replay, member ``k``'s drawn
        with ``generators[k]`` as :meth:`update_inputs` draws them; row ``k`` goes to its ``update_inputs``."""
        g, b = self.config.updates_per_step, self.config.batch_size
        return replay.sample(g * b, generators).reshape(len(generators), g, b)

    def after_update(self, metrics: TensorDict, context: Any) -> TensorDict:
        """What follows an update (e.g. priorities written back); returns the metrics to log."""
        return metrics

    def learn(self) -> TensorDict:
        self.prepare_state(self.state)
        args, context = self.update_inputs()
        self.state, metrics = self._update(self.state, *args)
        return self.after_update(metrics, context)

    def params_finite(self) -> bool:
        leaves = [v for v in self.state.exclude("config").values(True, True) if v.is_floating_point()]
        return bool(torch.stack([torch.isfinite(v).all() for v in leaves]).all())

    # -- evaluation and saving ---------------------------------------------
    def policy(self) -> Policy:
        low = high = None
        native = getattr(self, "native_action_space", None) or self.act_space
        if isinstance(native, gym.spaces.Box):
            low, high = native.low, native.high
        return Policy(self.entry.name, self.state["params"], self.config, low, high, self.obs_space.shape, self.device)

    def state_tensors(self) -> TensorDict:
        return TensorDict(
            {
                "state": self.state.exclude("config"),
                "replay": self.replay.state_dict(),
                "generator": self.generator.get_state(),
            },
            batch_size=[],
        )

    def load_state_tensors(self, td: TensorDict) -> None:
        state = td["state"].to(self.device)
        expected = set(self.state.exclude("config").keys(True, True))
        got = set(state.keys(True, True))
        if expected != got:
            missing = sorted(map(str, expected - got))[:3]
            raise ValueError(
                f"Checkpoint state does not match algo {self.entry.name!r} (missing {missing}); load it with the config it was trained with."
            )
        for key in expected:
            if state[key].shape != self.state[key].shape:
                raise ValueError(
                    f"Checkpoint tensor {key} has shape {tuple(state[key].shape)} but this config expects "
                    f"{tuple(self.state[key].shape)}; load it with the config it was trained with."
                )
        config = self.state.get_non_tensor("config")
        self.state = state
        self.state.set_non_tensor("config", config)
        if "replay" in td.keys():  # a population restores a batched replay itself
            self.replay.load_state_dict(td["replay"])
        self.generator.set_state(td["generator"])

    def export_meta(self) -> dict[str, Any]:
        """What :func:`rlfunc.load` needs besides the tensors."""
        meta: dict[str, Any] = {"obs_shape": list(self.obs_space.shape)}
        native = getattr(self, "native_action_space", None) or self.act_space
        if isinstance(native, gym.spaces.Box):
            meta["action_low"] = native.low.tolist()
            meta["action_high"] = native.high.tolist()
        return meta


def _native_action_space(run_config, act_space: gym.Space) -> gym.Space:
    """The env's own action space (before rlfunc rescales it to [-1, 1])."""
    from rlfunc.envs import build_wrappers, make_env

    env = make_env(
        run_config.env.id,
        kwargs=run_config.env.kwargs,
        wrappers=build_wrappers(run_config.env.wrappers),
        rescale_actions=False,
    )
    space = env.action_space
    env.close()
    return space
