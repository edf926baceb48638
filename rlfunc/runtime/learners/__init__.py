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

Both halves of the loop are split around their pure call, so that a population
(:mod:`rlfunc.runtime.population`) runs each member's learner code and one
vmapped pure call for all members:

* ``explore`` is ``act_outputs(act_fn(state["params"], *act_inputs(obs, env_step,
  episode_start)))``: ``act_inputs`` draws from the learner's generator and
  prepares its carry and schedule (or returns the actions themselves where no
  network acts, e.g. a uniform warm-up), ``act_fn`` is the pure ``act``
  (tensors in and out), ``act_outputs`` keeps the new carry and returns numpy;
* ``learn`` is ``prepare_state(state)`` (what the update reads from the
  runtime, written in place: DrQ-v2's agent step), ``update_inputs()`` ->
  ``(update's arguments after the state, context)`` from the learner's replay and
  generator, the pure ``update``, and ``after_update(metrics, context)`` (R2D2's
  priorities written back) -> the metrics to log;
* ``population_replay(members)`` -> a replay batched over members (or ``None``),
  ``use_replay(replay)`` (a member then stores into its row, ``member(k)``) and
  ``population_sample(replay, generators)`` -> every member's rows ``[P, ...]`` in
  one draw and gather, row ``k`` handed to member ``k``'s ``update_inputs(rows)``.
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
