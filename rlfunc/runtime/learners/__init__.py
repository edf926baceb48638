"""Learners: the stateful glue between the loop and a pure algorithm.

A learner owns the algorithm state (one TensorDict), its replay buffer and
its random generator, and exposes what the training loop needs:

* ``explore(obs, env_step, episode_start)`` -> actions for every env
  (uniformly random before ``train.learning_starts`` where the algorithm
  warms up that way, then the stochastic policy;
  ``episode_start [num_envs]`` marks observations that begin an episode, where
  recurrent learners reset their carry);
* ``observe(rows)`` stores transitions from the collector;
* ``ready(env_step)`` says whether to run ``learn()`` -> metrics at this step;
  the trainer calls it after storing each step, or, for a learner with
  ``learns_before_env_step = True`` (DrQ-v2's official order), between
  acting and stepping the env;
* ``policy()`` -> a deterministic :class:`~rlfunc.runtime.policy.Policy`;
* ``state_tensors()`` / ``load_state_tensors(td)`` for checkpoints;
* class attributes ``learning_starts_unit`` and ``replay_size_unit``: what
  ``train.learning_starts`` and ``train.replay_size`` count for it (env steps,
  DrQ-v2's agent steps or R2D2's windows stored; transitions, frames or
  windows), named in every config message about them, and the classmethod
  ``check_run_config(run_config)``: the checks across config sections that need
  no env (the warm-up fits the run and the replay).

Only :meth:`learn` calls the (optionally compiled) pure ``update``; with
``train.cuda_graph`` it is wrapped by :func:`learner_update` so that the state
keeps fixed addresses and the update replays as a CUDA graph.
"""

from rlfunc.runtime.learners.base import TransitionLearner, compiled_update, learner_update
from rlfunc.runtime.learners.pixel import PixelLearner
from rlfunc.runtime.learners.prior_data import PriorDataLearner
from rlfunc.runtime.learners.sequence import R2D2Learner, SequenceLearner

__all__ = [
    "TransitionLearner",
    "SequenceLearner",
    "R2D2Learner",
    "PriorDataLearner",
    "PixelLearner",
    "compiled_update",
    "learner_update",
]
