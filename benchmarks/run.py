"""rlfunc benchmarks: one CLI, one subcommand per kind of measurement.

    python benchmarks/run.py update --algo redq|rlpd|drqn|r2d2|drqv2|ALL [--device cpu|cuda] [--threads 1 2]
                                    [--repeats R] [--quick] [--no-compile] [--out PATH]
    python benchmarks/run.py learn --algo redq --seeds 3 [--steps N] [--jobs J] [--set key=value ...]
    python benchmarks/run.py replay | stored-state RUN_DIR | drqn-episodes CHECKPOINT... | peers | report

This file is the entry point: the subcommand registry (:data:`SUBCOMMANDS`,
:func:`subcommand`), :func:`build_parser` and :func:`main`. Each subcommand lives
in a module of its own that adds itself with ``register(run)`` (``run`` is this
module; the registrations are at the end of this file):

* ``update`` -- learner throughput of the functional update against the imperative
  baseline of ``benchmarks/baselines``, in the same process, on pre-sampled
  batches (``benchmarks/update_bench.py``; DrQ-v2 in ``benchmarks/drqv2_bench.py``,
  R2D2 in ``benchmarks/r2d2_bench.py``);
* ``learn``, ``learn-merge``, ``learn-collect`` -- learning curves over seeds (JSON + PNG):
  ``benchmarks/learn_bench.py``;
* ``replay`` (prioritized sequence sampling) and ``stored-state`` (R2D2's
  stored-state diagnostic): ``benchmarks/r2d2_bench.py``;
* ``drqn-episodes`` -- how a DRQN agent's greedy episodes end, acting from the
  carried state and from zero-state windows: ``benchmarks/drqn_bench.py``;
* ``peers`` -- rlfunc beside Stable-Baselines3 and TorchRL: ``benchmarks/peers/``
  (one module per task family);
* ``reference-returns``, ``population``, ``population-replay``, ``locomotion-data``
  and the others: the module named beside their registration;
* ``report`` -- ``benchmarks/RESULTS.md`` from ``benchmarks/results/*.json``
  (``benchmarks/report.py``).

What they share is ``benchmarks/harness.py``: interleaved timing windows and
medians, warm-up and window sizing, the matmul FLOP ceiling, the machine record,
the JSON writer (every JSON records the ``command`` that wrote it) and the table
printer. This module re-exports those names, so a plug-in's ``register(run)``
reaches them as ``run.NAME``.

Adding things:

* a subcommand: a module with ``configure(parser)``, ``run(args) -> int`` and
  ``register(run)`` calling ``run.subcommand(name, help, configure)(run_fn)``;
  import it and call its ``register`` at the end of this file;
* an algorithm for ``update``: ``fn(args) -> result dict`` (same JSON shape as
  ``benchmarks.update_bench.update_redq``) added to ``UPDATE_ALGOS``.

The machines here are noisy (see shared/MACHINE-FACTS.md): every number is the
median of several timed windows, and the variants are interleaved (each
repeat runs every variant once, in a rotated order) so that load changes hit
all of them alike.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# --------------------------------------------------------------------------- registry

SUBCOMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {}


def subcommand(name: str, help: str, configure: Callable[[argparse.ArgumentParser], None]):
    """Register the decorated ``run(args) -> int`` as subcommand ``name``; ``configure`` adds its options."""

    def register(run: Callable[[argparse.Namespace], int]):
        SUBCOMMANDS[name] = (help, configure, run)
        return run

    return register


# --------------------------------------------------------------------------- shared helpers

# The timing harness lives in benchmarks/harness.py; the plug-ins reach it as run.NAME (their register(run)).
from benchmarks import harness  # noqa: E402
from benchmarks.harness import (  # noqa: E402,F401
    RESULTS_DIR,
    cpu_model,
    dynamo_counts,
    error_text,
    machine_info,
    matmul_ceiling,
    print_table,
    sync,
    time_interleaved,
    warm_up,
    window_steps,
    write_json,
)


# --------------------------------------------------------------------------- update

# update: learner throughput, functional vs imperative (REDQ, RLPD, DRQN), benchmarks/update_bench.py; it adds
# DrQ-v2's entries (benchmarks/drqv2_bench.py). The names imported here are the ones plug-ins and tests use as run.NAME.
from benchmarks import update_bench as _update_bench  # noqa: E402
from benchmarks.update_bench import (  # noqa: E402,F401
    UPDATE_ALGOS,
    _redq_problem,
    add_cuda_graph_variant,
    cuda_graph_variant,
    drqn_batch,
    drqn_flops,
    empty_row,
    redq_flops,
    unavailable_row,
)

_update_bench.register(sys.modules[__name__])


# --------------------------------------------------------------------------- learn

# learn, learn-merge, learn-collect: learning curves over seeds, benchmarks/learn_bench.py. The names imported here are
# the ones plug-ins use as run.NAME (r2d2_bench.py and rlpd_bench.py add tables and wrap learn).
from benchmarks import learn_bench as _learn_bench  # noqa: E402
from benchmarks.learn_bench import (  # noqa: E402,F401
    LEARN_ALGOS,
    _summary,
    learn_entries,
    learn_plan,
    run_learn_plan,
)

_learn_bench.register(sys.modules[__name__])


# --------------------------------------------------------------------------- R2D2: update --algo r2d2, replay, stored-state, learn --algo r2d2

from benchmarks import r2d2_bench as _r2d2_bench  # noqa: E402

_r2d2_bench.register(sys.modules[__name__])

# RLPD: learn --algo rlpd (expert -> prior data -> RLPD / RLPD without LayerNorm / SAC), benchmarks/rlpd_bench.py
from benchmarks import rlpd_bench as _rlpd_bench  # noqa: E402

_rlpd_bench.register(sys.modules[__name__])

# DRQN: drqn-episodes (how greedy episodes end, carried state vs zero-state windows), benchmarks/drqn_bench.py
from benchmarks import drqn_bench as _drqn_bench  # noqa: E402

_drqn_bench.register(sys.modules[__name__])

# peers: rlfunc side by side with Stable-Baselines3 and TorchRL, benchmarks/peers/ (one module per task family)
from benchmarks import peers as _peers  # noqa: E402

_peers.register(sys.modules[__name__])

# population: P REDQ learners as one population vs P separate ones in one process, benchmarks/population_bench.py
from benchmarks import population_bench as _population_bench  # noqa: E402

_population_bench.register(sys.modules[__name__])

# locomotion-data: D4RL-style prior data for RLPD on MuJoCo, made locally, benchmarks/locomotion_data.py
from benchmarks import locomotion_data as _locomotion_data  # noqa: E402

_locomotion_data.register(sys.modules[__name__])

# population-replay: one population replay sample vs P single replays' samples, benchmarks/population_replay_bench.py
from benchmarks import population_replay_bench as _population_replay_bench  # noqa: E402

_population_replay_bench.register(sys.modules[__name__])

# distributed: distributed R2D2 on Ray actors, env steps/s with the learner paused and with it, benchmarks/distributed_bench.py
from benchmarks import distributed_bench as _distributed_bench  # noqa: E402

_distributed_bench.register(sys.modules[__name__])


# --------------------------------------------------------------------------- main


from benchmarks import report as _report  # noqa: E402

subcommand("report", "gather benchmarks/results/*.json into benchmarks/RESULTS.md", _report.configure)(_report.run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benchmarks/run.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_, configure, _run) in SUBCOMMANDS.items():
        configure(sub.add_parser(name, help=help_, description=help_))
    return parser


def main(argv: list[str] | None = None) -> int:
    import shlex

    argv = list(sys.argv[1:] if argv is None else argv)
    harness.COMMAND = "python benchmarks/run.py " + " ".join(shlex.quote(a) for a in argv)
    args = build_parser().parse_args(argv)
    return SUBCOMMANDS[args.command][2](args)


if __name__ == "__main__":
    sys.exit(main())
