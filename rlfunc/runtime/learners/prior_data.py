"""RLPD's learner: online replay plus a prior dataset, sampled half and half (:class:`PriorDataLearner`)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from tensordict import TensorDict

from rlfunc.runtime.learners.base import TransitionLearner, _native_action_space, _numel
from rlfunc.runtime.memory import Need

__all__ = ["PriorDataLearner"]


class PriorDataLearner(TransitionLearner):
    """Off-policy learning from online replay mixed with prior data (RLPD).

    The run config's ``data`` section names the dataset (``.npz`` or Minari
    directory, :mod:`rlfunc.replay.offline`). It is loaded and validated
    against the env's spaces here, at construction, so a bad dataset stops
    the run before any env step. Each :meth:`learn` draws one ``[G, B]``
    batch in which every mini-batch holds exactly ``round(B *
    data.offline_ratio)`` prior rows and the rest from the online replay
    (:class:`~rlfunc.replay.offline.MixedSampler`); the prior data is never
    copied into the online buffer.

    ``data.pretrain_steps > 0`` (the earlier package's option; RLPD's
    default is 0) runs that many updates on prior-only ``[G, B]`` batches
    before the first online update (the official ``train_finetuning.py``
    pre-training loop).

    Checkpoints do not contain the dataset: they store its path and SHA-256
    (``meta["dataset"]`` and a tensor in the state), and a resumed run reloads
    the file and refuses to continue if it changed.
    """

    def __init__(self, entry, run_config, obs_space: gym.Space, act_space: gym.Space, dataset=None) -> None:
        """``dataset``: an :class:`~rlfunc.replay.offline.OfflineDataset` already loaded from this
        config's ``data`` section (a population's members share the first member's, read once),
        else it is loaded here."""
        from rlfunc.replay.offline import MixedSampler, load_dataset

        # set before the base constructor: its memory check sizes the dataset (_data_needs) with the replay
        self.data_cfg = run_config.data
        self.dataset = dataset
        super().__init__(entry, run_config, obs_space, act_space)
        if self.data_cfg.path and dataset is None:
            native_act = _native_action_space(run_config, act_space)
            self.dataset = load_dataset(
                self.data_cfg.path,
                obs_space,
                native_act,
                fmt=self.data_cfg.format,
                env_id=run_config.env.id,
                env_kwargs=dict(run_config.env.kwargs or {}),
                env_wrappers=list(run_config.env.wrappers or []),
                device=self.device,
            )
        ratio = self.data_cfg.offline_ratio if self.dataset is not None else 0.0
        self.sampler = MixedSampler(self.dataset, self.replay, ratio)
        self.pretrained = 0

    def _data_needs(self) -> tuple[list[Need], list[Need]]:
        """The prior dataset ``data.path``, sized before it is read (:func:`rlfunc.replay.offline.dataset_size`:
        an ``.npz``'s unpacked arrays from its zip directory, a Minari dataset's data files).

        Host: the arrays as read (a Minari dataset's twice: its episodes, then their concatenation
        into transitions, :func:`~rlfunc.replay.offline.read_minari`) plus the float32 training rows
        made of them (``obs``, ``action``, ``reward``, ``next_obs``, ``terminated``; on the CPU the rows
        share the memory of arrays that are float32 already, so this counts an upper bound: 1M
        Hopper transitions, 106 MB unpacked, counted 214 MB, took 202 MB at their peak while loading).
        Device (CUDA): the float32 rows. Nothing when the dataset is given (a population's members share
        the first member's) or when the path is no dataset (:func:`~rlfunc.replay.offline.load_dataset`
        then refuses it in its own words)."""
        if not self.data_cfg.path or self.dataset is not None:
            return [], []
        from rlfunc.replay.offline import DatasetError, dataset_size, detect_format

        path, fmt = self.data_cfg.path, self.data_cfg.format
        try:
            raw, rows = dataset_size(path, fmt)
            minari = detect_format(path, fmt) == "minari"
        except DatasetError:
            return [], []
        per = 4 * (2 * _numel(self.obs_space) + _numel(self.act_space) + 2)  # obs, next_obs, action, reward, terminated
        converted = rows * per if rows is not None else raw  # rows unknown: as many bytes as the arrays
        held = f"{rows} transitions" if rows is not None else "its transitions"
        subject, fix = f"data.path={path}", "use a smaller dataset or lower train.replay_size"
        host = Need(subject, (2 if minari else 1) * raw + converted,
                    f"the prior dataset ({held}, read and converted to float32 rows of {per} bytes)", fix)
        if self.device.type == "cpu":
            return [host], []
        return [host], [Need(subject, converted, f"the prior dataset's float32 rows ({held}) on {self.device}", fix)]

    def ready(self, env_step: int) -> bool:
        return env_step >= self.train_cfg.learning_starts and self.sampler.ready()

    def sample_batch(self) -> TensorDict:
        g, b = self.config.updates_per_step, self.config.batch_size
        return self.sampler.sample(g, b, generator=self.generator)

    def use_replay(self, replay) -> None:
        super().use_replay(replay)
        self.sampler.online = replay

    def population_sample(self, replay, generators) -> TensorDict:
        """:class:`~rlfunc.replay.offline.MixedSampler`'s order per member: its prior rows first (from
        the shared dataset), then its online rows; each part one gather for all members."""
        from rlfunc.replay.population import gather_rows

        g, b, p = self.config.updates_per_step, self.config.batch_size, len(generators)
        k = self.sampler.offline_rows(b)
        parts = []
        if k > 0:
            idx = torch.cat([self.dataset.draw_indices(g * k, generator=gen) for gen in generators])
            parts.append(gather_rows(self.dataset.rows, idx, torch.Size([p, g, k])))
        if k < b:
            online = replay.sample(g * (b - k), generators)  # [P, G * (B - k)]
            if not parts:
                return online.reshape(p, g, b)
            prior = parts[0]
            out = {
                key: torch.cat([prior.get(key), t.reshape(p, g, b - k, *t.shape[2:])], dim=2)
                for key, t in online.items(include_nested=True, leaves_only=True)
            }
            return TensorDict(out, batch_size=[p, g, b], device=online.device)
        return parts[0]

    def pretrain(self) -> TensorDict | None:
        """Run the remaining ``data.pretrain_steps`` prior-only updates (no-op when done)."""
        metrics = None
        g, b = self.config.updates_per_step, self.config.batch_size
        while self.dataset is not None and self.pretrained < self.data_cfg.pretrain_steps:
            batch = self.dataset.sample(g * b, generator=self.generator).reshape(g, b)
            noise = self.algo.draw_noise(self.config, g, b, self.act_dim, generator=self.generator, device=self.device)
            self.state, metrics = self._update(self.state, batch, noise)
            self.pretrained += 1
        return metrics

    def learn(self) -> TensorDict:
        self.pretrain()
        return super().learn()

    def _checksum_tensor(self) -> torch.Tensor:
        digest = bytes.fromhex(self.dataset.checksum) if self.dataset is not None else b""
        return torch.tensor(list(digest), dtype=torch.uint8)

    def state_tensors(self) -> TensorDict:
        td = super().state_tensors()
        td["data"] = TensorDict(
            {"sha256": self._checksum_tensor(), "pretrained": torch.tensor(self.pretrained, dtype=torch.int64)},
            batch_size=[],
        )
        return td

    def load_state_tensors(self, td: TensorDict) -> None:
        from rlfunc.replay.offline import DatasetError

        if "data" in td.keys():
            saved = bytes(td["data", "sha256"].tolist()).hex()
            current = self._checksum_tensor()
            if saved != bytes(current.tolist()).hex():
                path = self.dataset.path if self.dataset is not None else None
                raise DatasetError(
                    f"The prior dataset {path!r} is not the one this run was trained with "
                    f"(sha256 {bytes(current.tolist()).hex()[:12] or 'none'} now, {saved[:12] or 'none'} in the checkpoint); "
                    "restore the original file or start a new run."
                )
            self.pretrained = int(td["data", "pretrained"])
        super().load_state_tensors(td)

    def export_meta(self) -> dict[str, Any]:
        from rlfunc.replay.offline import describe

        meta = super().export_meta()
        if self.dataset is not None:
            meta["dataset"] = describe(self.dataset)
        return meta
