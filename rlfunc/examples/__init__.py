"""Single-file training scripts, one per algorithm, CleanRL style.

Each reads top to bottom -- typed arguments, env, ``init``, the loop
(collect -> replay -> ``update``), evaluation -- and uses only rlfunc's public
pure pieces, so a researcher can copy one and change the loss::

    python -m rlfunc.examples.redq_pendulum --total-steps 3000
    python -m rlfunc.examples.redq_population --seeds 0 1 2 3   # many seeds (and rates) in one process
    python -m rlfunc.examples.rlpd_pendulum --data-path pendulum.npz
    python -m rlfunc.examples.drqn_cartpole
    python -m rlfunc.examples.r2d2_cartpole
    python -m rlfunc.examples.drqv2_dmc            # needs the dmc extra; or --env-id Pendulum-v1

Each makes the same random draws in the same order as ``rlfunc train`` with
the matching config, so for the same seed and step count it computes the same
numbers (``tests/test_examples_match_train.py``); each member of ``redq_population`` computes
what ``redq_pendulum`` computes with its seed and rate (``tests/test_examples_population.py``). ``main(Args(...))`` runs
one from Python and returns ``{"state", "evals"}``.
"""
