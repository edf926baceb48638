"""rlfunc side by side with Stable-Baselines3 and TorchRL, run through ``benchmarks/run.py``:

    python benchmarks/run.py peers [--threads 1] [--device cpu|cuda] [--quick] [--tiny] [--no-compile]
                                   [--only TASK ...] [--out PATH] [--note TEXT]

Every comparison of a task runs in one process, on identical shapes, batch size
and thread count, timed with :func:`benchmarks.run.time_interleaved` (each
repeat runs every variant for one window, in a rotated order; the throughput is
the median window). Writes ``benchmarks/results/peers.json`` (``peers_cuda.json``
with ``--device cuda``)::

    {"machine": {...run.machine_info...}, "settings": {...},
     "rows": [{"task", "library", "variant", "throughput", "unit", "ratio_vs_rlfunc",
               "threads", "device", "versions": {...}, "problem": {...},
               "unavailable"?: "<why>", ...}, ...]}

and a bar chart ``peers.png`` beside it (one panel per task), and prints a
table. ``ratio_vs_rlfunc`` is a row's throughput over the best ``rlfunc`` row
of the same task. A peer that is not installed, or fails to build or run, gets
``throughput: null`` and ``unavailable: "<reason>"`` instead of stopping the
command. ``library`` is one of ``rlfunc``, ``imperative`` (this repository's
``benchmarks/baselines``: the ordinary ``nn.Module`` + ``torch.optim`` way),
``torchrl``, ``stable-baselines3``.

Tasks (``--only`` takes these names):

``redq_critic_update`` / ``sac_critic_update`` -- critic updates per second of
REDQ (N=10 critics, target subset M=2) and SAC (N=2, M=2), Hopper shapes (obs
11, action 3), MLP 256-256, batch 256, G=20 critic updates and one actor and
temperature update per environment step, on pre-sampled batches (no replay):
``rlfunc`` eager (``redq.update``, default ``ensemble_mode``) and compiled
(``redq.make_update("step")``); the imperative baseline
(``benchmarks/baselines/redq.py``: N modules, N+2 Adams, Python loops);
TorchRL ``REDQLoss`` / ``SACLoss`` with a ``ProbabilisticActor`` (``MLP`` ->
``NormalParamExtractor`` -> ``TanhNormal``) and a ``ValueOperator`` MLP critic,
``torch.optim.Adam`` per parameter group and ``SoftUpdate``, eager and under
``torch.compile`` (one compiled function for the critic-only step, one for the
last step of the G; backward and the optimizer step break the graph there).
Caveats: TorchRL's loss computes the actor and temperature losses in *every*
forward (its design), so to keep REDQ's schedule (actor once per G) it
back-propagates only ``loss_qvalue`` for G-1 of the G steps and wastes the
actor forward there; TorchRL's REDQ *recipe* updates the actor on every critic
step instead (more work per env step, not what REDQ does). TorchRL draws its
randomness inside the loss, rlfunc and the baseline take pre-drawn noise.

``pendulum_train_loop_utd20`` -- environment steps per second of a whole
training loop on Pendulum-v1 at UTD 20 (batch 256, 256-256): act, env step,
store, sample, 20 critic updates (+ actor), measured after a warm-up in which
learning has started (``learning_starts`` steps of random actions, then a few
learning steps; only steps with updates are timed; each window is a segment of
``--segment-steps`` env steps). ``rlfunc`` REDQ (N=10) and SAC (N=2, G=20)
drive the runtime's own pieces (``rlfunc.runtime.trainer.Trainer``'s env,
collector and ``TransitionLearner`` with ``configs/redq/pendulum.yaml`` /
``configs/sac/pendulum.yaml`` and overrides; the loop body of
``Trainer.run`` without evaluation, logging and checkpoints); the compiled row
sets ``train.compile=true``. Stable-Baselines3 ``SAC`` (``gradient_steps=20,
train_freq=1``, same nets and batch; each window is one ``learn()`` call of
``--segment-steps`` steps). TorchRL's REDQ recipe (``sota-implementations/redq``)
is not shipped in the wheel, so the TorchRL row is a loop from its components
(``GymEnv``, ``step_and_maybe_reset``, ``ReplayBuffer(LazyTensorStorage)``,
``REDQLoss``, ``SoftUpdate``) with the same schedule as above. Caveats: SB3's
SAC updates the actor on every gradient step (rlfunc once per env step), so
per env step it does more actor work than rlfunc SAC; rlfunc samples ``G*B``
rows once per env step, SB3 and TorchRL sample ``B`` rows per update (their
usual way); ``ratio_vs_rlfunc`` divides by the best rlfunc row, which is SAC's.

``sequence_update`` -- DRQN updates per second: batch 32 windows of 10 steps,
64-unit ReLU encoder, LSTM 128, obs 4, 2 actions, Huber TD loss, Adam, target
copy period 1000: ``rlfunc`` ``drqn.update`` eager and compiled
(``torch.compile(fullgraph=True)``), the imperative baseline
(``benchmarks/baselines/drqn.py``, ``nn.LSTM``), TorchRL ``DQNLoss`` over
``TensorDictSequential(encoder, LSTMModule(default_recurrent_mode=True), head,
QValueModule)`` with ``HardUpdate``, eager and compiled. Caveats: TorchRL's
batch is batch-major ``[B, T]`` with ``is_init`` and zero stored recurrent
states, has no padding mask (the same padded windows are fed, unmasked) and
its target unroll covers T steps (rlfunc's T + 1).

``replay_sample`` -- batches per second of sampling 256 transitions (Hopper
shapes) from a full 100k-transition buffer: ``rlfunc`` ``UniformReplay``
(and ``PrioritizedSequenceReplay`` with 1-step windows, i.e. prioritized
transitions); SB3 ``ReplayBuffer`` (filled with its ``add``; ``sample``
returns torch tensors); TorchRL ``ReplayBuffer(LazyTensorStorage)`` and
``PrioritizedReplayBuffer`` (with torch 2.13 TorchRL's C++ extension does not
load, so its segment trees, hence its prioritized buffers, are unavailable).

``replay_sample_sequence`` -- batches per second of sampling 32 windows of 10
steps (DRQN shapes) from 100k stored transitions (episodes of 200 steps):
``rlfunc`` ``SequenceReplay`` and ``PrioritizedSequenceReplay``; TorchRL
``ReplayBuffer(LazyTensorStorage, SliceSampler(slice_len=10))`` (slices start
anywhere inside an episode; rlfunc stores aligned windows) and
``PrioritizedSliceSampler`` (unavailable, as above). SB3 has no sequence
replay (its recurrent buffers live in sb3-contrib and are on-policy rollouts).

Timing: each variant is built and called (twice; once for a loop segment),
then every variant is called once more after all are built ("settling"), and
the windows are sized from that call. Settling matters: importing and compiling
TorchRL registers pytree node types, and dynamo guards rlfunc's compiled
functions on ``len(torch.utils._pytree.SUPPORTED_NODES)``, so they recompile
once after TorchRL's compile; without settling that recompile lands in a timed
window. ``compile_s`` is the time of the calls before timing beyond as many
settled calls (for the compiled loop it is part of ``setup_s``, which also holds
the random steps and the warm-up); ``graphs_compiled``/``graph_breaks`` count
dynamo's work while building a compiled variant, ``recompiled_during_timing``
flags any recompile inside the windows. TorchRL under ``torch.compile`` breaks
the graph in many places (backward, ``Optimizer.step``, tensordict internals)
and hits dynamo's recompile limit in tensordict helpers (those frames then run
eagerly): its compiled rows measure what ``torch.compile`` gives a TorchRL user
today, not a fullgraph compile.

``--device cuda`` (exit code 2 if CUDA is not available) puts every variant on
the GPU: rlfunc state, batches and replay (``device=``; sampling draws its
indices with a CUDA generator), the imperative baselines, TorchRL modules,
losses, batches and ``LazyTensorStorage(device=...)``, SB3 ``device="cuda"``
(its ``ReplayBuffer`` keeps numpy arrays on the host and copies every sampled
batch to the GPU: its real behaviour, measured as is and said in the row's
``note``), and the training loops (rlfunc ``train.device=cuda``, SB3 SAC on
cuda, TorchRL's ``GymEnv(device="cuda")``; the gymnasium env itself steps on the
host for all of them). Every timing reads the clock after
``torch.cuda.synchronize``; rows record ``"device": "cuda"`` and the machine info
the GPU's name. A task that fails outside its variants' guards becomes one
``(whole task)`` row with the reason.

Options: ``--quick`` (2 short windows, 2-step loop segments: a smoke test, not
a measurement), ``--tiny`` (tiny shapes for the tests; the ``problem`` of every
row says which shapes ran), ``--no-compile`` (skip every compiled row),
``--repeats`` (default 5), ``--window-s`` (default 1.0), ``--segment-steps``
(default 30), ``--loop-repeats`` (default 3), ``--loop-warmup`` (default 3),
``--traceback`` (print the traceback of every failing variant). Compiling takes
minutes on a 2-core CPU (TorchRL's REDQ and SAC steps about 2 minutes each here,
rlfunc's about 1); compile time is excluded from throughput. A full run at one
thread should take about 20 minutes (an estimate from ``--quick`` runs, not
measured), mostly compiling and the training loop (TorchRL's loop is the slowest).
Installing the peers: ``pip install stable-baselines3`` and
``pip install --no-deps torchrl`` (TorchRL pins ``tensordict<0.15``; with
``--no-deps`` its pure-Python losses and buffers run with ours).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TASKS = (
    "redq_critic_update",
    "sac_critic_update",
    "pendulum_train_loop_utd20",
    "sequence_update",
    "replay_sample",
    "replay_sample_sequence",
)

# Problem sizes. "full": the shapes; "tiny": smoke tests only.
SIZES: dict[str, dict[str, Any]] = {
    "full": dict(
        obs=11, act=3, hidden=(256, 256), batch=256, utd=20, redq_critics=10, redq_subset=2,
        loop_batch=256, loop_hidden=(256, 256), loop_utd=20, loop_learning_starts=256, loop_replay=100_000,
        drqn_batch=32, drqn_window=10, drqn_lstm=128, drqn_encoder=64, drqn_obs=4, drqn_actions=2,
        replay_capacity=100_000, replay_batch=256, seq_window=10, seq_batch=32, seq_episode=200,
    ),
    "tiny": dict(
        obs=11, act=3, hidden=(16, 16), batch=8, utd=2, redq_critics=3, redq_subset=2,
        loop_batch=8, loop_hidden=(16, 16), loop_utd=2, loop_learning_starts=16, loop_replay=1_000,
        drqn_batch=4, drqn_window=4, drqn_lstm=8, drqn_encoder=8, drqn_obs=4, drqn_actions=2,
        replay_capacity=2_000, replay_batch=32, seq_window=4, seq_batch=4, seq_episode=20,
    ),
}

_PEER_MODULES = {"torchrl": "torchrl", "stable-baselines3": "stable_baselines3"}


# --------------------------------------------------------------------------- helpers


def _reason(exc: BaseException) -> str:
    """One sentence from an exception: its type and first non-empty line."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def _device(args: argparse.Namespace) -> torch.device:
    """The device every variant runs on (``--device``; ``cpu`` when the option is absent)."""
    return torch.device(getattr(args, "device", None) or "cpu")


def _peer(library: str):
    """``(module, None)`` if ``library`` imports, else ``(None, reason)``."""
    import importlib

    name = _PEER_MODULES[library]
    try:
        return importlib.import_module(name), None
    except Exception as exc:  # noqa: BLE001 -- any import failure makes the peer unavailable
        if isinstance(exc, ImportError):
            return None, f"{library} is not installed ({_reason(exc)})"
        return None, f"{library} failed to import ({_reason(exc)})"


class Unavailable(RuntimeError):
    """Raised by a variant's setup with the one-sentence reason that goes into its row as-is."""


def _torchrl_extension_error() -> str | None:
    """Why TorchRL's C++ extension (its segment trees) does not load, or ``None`` if it does."""
    try:
        import torchrl._torchrl  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        text = str(exc)
        return "undefined symbol (built for another torch)" if "undefined symbol" in text else _reason(exc)[:120]
    return None


def _torchrl_prioritized(make):
    """``make()`` for a TorchRL prioritized sampler/buffer; a missing C++ segment tree becomes :class:`Unavailable`."""
    try:
        return make()
    except RuntimeError as exc:
        if "SegmentTree" not in str(exc):
            raise
        why = _torchrl_extension_error() or "unknown"
        raise Unavailable(
            f"TorchRL's prioritized sampling needs its C++ sum-segment tree, and its C++ extension "
            f"(torchrl._torchrl) does not load with torch {torch.__version__}: {why}"
        ) from exc


def _versions(library: str) -> dict[str, str]:
    import tensordict

    import rlfunc

    v = {"torch": torch.__version__, "tensordict": tensordict.__version__}
    if library in ("rlfunc", "imperative"):
        v["rlfunc"] = rlfunc.__version__
    else:
        mod, _ = _peer(library)
        v[library] = getattr(mod, "__version__", "unknown") if mod is not None else "not installed"
    return v


class Variant:
    """One row to measure: ``setup()`` builds it and returns ``step()`` (one call = ``units`` of work)."""

    def __init__(self, library: str, variant: str, setup: Callable[[], Callable[[], None]] | None = None, *,
                 units: float = 1.0, unavailable: str | None = None, compiled: bool = False, **extra: Any) -> None:
        self.library, self.variant, self.setup, self.units = library, variant, setup, units
        self.unavailable, self.compiled, self.extra = unavailable, compiled, dict(extra)
        self.step: Callable[[], None] | None = None
        self.throughput: float | None = None
        self.windows_s: list[float] = []


def _dynamo_counts() -> tuple[int, int]:
    """(graphs compiled, graph breaks) so far in this process."""
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"]), int(sum(counters["graph_break"].values()))
    except Exception:  # noqa: BLE001 -- private API; only loses the count
        return -1, -1


def _measure(variants: list[Variant], args: argparse.Namespace, run, *, fixed_steps: bool = False) -> None:
    """Build, warm up and time every available variant, interleaved; fills ``throughput``.

    ``fixed_steps``: every window is one call (a training-loop segment); otherwise
    each window has about ``args.window_s`` seconds of calls.
    """
    device = _device(args)
    sync = run.sync  # torch.cuda.synchronize(device) before reading the clock on CUDA; no-op on CPU
    warm: dict[int, float] = {}
    pre_calls: dict[int, list[float]] = {}  # seconds of every call before timing
    for i, v in enumerate(variants):
        if v.unavailable is not None:
            continue
        label = f"{v.library} / {v.variant}"
        try:
            graphs0, breaks0 = _dynamo_counts()
            sync(device)
            t0 = time.perf_counter()
            v.step = v.setup()
            sync(device)
            v.extra["setup_s"] = round(time.perf_counter() - t0, 2)
            for _ in range(1 if fixed_steps else 2):  # compiles a compiled variant (guards may fail once more)
                sync(device)
                t0 = time.perf_counter()
                v.step()
                sync(device)
                pre_calls.setdefault(i, []).append(time.perf_counter() - t0)
            warm[i] = pre_calls[i][-1]
            if v.compiled:
                graphs1, breaks1 = _dynamo_counts()
                v.extra["graphs_compiled"] = graphs1 - graphs0
                v.extra["graph_breaks"] = breaks1 - breaks0
            print(f"  ready: {label} (setup {v.extra['setup_s']:.1f} s, first call(s) {sum(pre_calls[i]):.1f} s)",
                  flush=True)
        except Exception as exc:  # noqa: BLE001 -- recorded as the row's reason; the rest still runs
            v.unavailable = str(exc) if isinstance(exc, Unavailable) else (
                f"failed while building or first running it: {_reason(exc)}")
            v.step = None
            print(f"  UNAVAILABLE: {label}: {v.unavailable}", flush=True)
            if getattr(args, "traceback", False):
                traceback.print_exc()
    live = [i for i, v in enumerate(variants) if v.step is not None]
    if not live:
        return
    torch.set_num_threads(args.threads)
    # Settle: one more call of each, after all are built -- building one variant (a peer's
    # torch.compile in particular) can make another recompile; that must not land in a window.
    # The windows are sized from this call.
    graphs0, _ = _dynamo_counts()
    for i in list(live):
        v = variants[i]
        try:
            sync(device)
            t1 = time.perf_counter()
            v.step()
            sync(device)
            warm[i] = time.perf_counter() - t1
            pre_calls[i].append(warm[i])
        except Exception as exc:  # noqa: BLE001
            v.unavailable, v.step = f"failed on its second run: {_reason(exc)}", None
            live.remove(i)
    if _dynamo_counts()[0] != graphs0:
        print(f"  note: {_dynamo_counts()[0] - graphs0} graph(s) recompiled while settling", flush=True)
        for i in live:  # time once more at the settled state
            sync(device)
            t1 = time.perf_counter()
            variants[i].step()
            sync(device)
            warm[i] = time.perf_counter() - t1
            pre_calls[i].append(warm[i])
    for i in live:
        v = variants[i]
        if v.compiled and fixed_steps:
            v.extra["compile_s"] = None
            v.extra["compile_note"] = "compiled during the loop's warm-up: included in setup_s, excluded from throughput"
        elif v.compiled:  # time of the calls before timing beyond as many settled calls: compiling
            v.extra["compile_s"] = round(max(sum(pre_calls[i]) - len(pre_calls[i]) * warm[i], 0.0), 1)
        print(f"  {v.library} / {v.variant}: {warm[i] * 1e3:.1f} ms/call"
              + (f", compile {v.extra['compile_s']:.0f} s (excluded)" if v.extra.get("compile_s") else ""), flush=True)
    runners = {str(i): variants[i].step for i in live}
    if fixed_steps:
        steps = {str(i): 1 for i in live}
    else:
        steps = {str(i): max(1, int(round(args.window_s / max(warm[i], 1e-7)))) for i in live}
    failed: dict[str, str] = {}

    def guard(key: str, fn: Callable[[], None]) -> Callable[[], None]:
        def call() -> None:
            if key in failed:
                return
            try:
                fn()
            except Exception as exc:  # noqa: BLE001
                failed[key] = f"failed while timing: {_reason(exc)}"

        return call

    print(f"  timing {len(live)} variants x {args.loop_repeats if fixed_steps else args.repeats} interleaved windows ...",
          flush=True)
    graphs0, _ = _dynamo_counts()
    repeats = args.loop_repeats if fixed_steps else args.repeats
    times = run.time_interleaved({k: guard(k, fn) for k, fn in runners.items()}, repeats=repeats,
                                 steps=steps, device=device)
    recompiled = _dynamo_counts()[0] != graphs0
    for key, ts in times.items():
        v = variants[int(key)]
        if key in failed:
            v.unavailable = failed[key]
            continue
        med = statistics.median(ts)
        v.throughput = v.units / med
        v.windows_s = ts
        v.extra["calls_per_window"] = steps[key]
        if v.compiled:
            v.extra["recompiled_during_timing"] = recompiled


def _rows(task: str, unit: str, problem: dict, variants: list[Variant], threads: int, device: str = "cpu") -> list[dict]:
    rows = []
    for v in variants:
        row: dict[str, Any] = {
            "task": task,
            "library": v.library,
            "variant": v.variant,
            "throughput": v.throughput,
            "unit": unit,
            "ratio_vs_rlfunc": None,
            "threads": threads,
            "device": device,
            "versions": _versions(v.library),
            "problem": problem,
        }
        if v.throughput is None:
            row["unavailable"] = v.unavailable or "not measured"
        else:
            row["ms_per_call"] = 1e3 * v.units / v.throughput
            row["ms_per_call_windows"] = [round(t * 1e3, 3) for t in v.windows_s]
        row.update(v.extra)
        rows.append(row)
    best = max((r["throughput"] for r in rows if r["library"] == "rlfunc" and r["throughput"]), default=None)
    for r in rows:
        if best and r["throughput"] is not None:
            r["ratio_vs_rlfunc"] = r["throughput"] / best
    return rows


def _unavailable_peers(libraries: tuple[str, ...]) -> dict[str, str]:
    """library -> reason, for the peers of ``libraries`` that do not import."""
    out = {}
    for lib in libraries:
        _, why = _peer(lib)
        if why:
            out[lib] = why
    return out


# --------------------------------------------------------------------------- TorchRL builders


def _torchrl_actor_critic(obs: int, act: int, hidden: tuple[int, ...], low: float = -1.0, high: float = 1.0,
                          device: torch.device = torch.device("cpu")):
    """TorchRL modules equivalent to rlfunc's REDQ nets: tanh-Gaussian actor, MLP critic on concat(obs, action).

    Built on the CPU and moved to ``device`` here, before a loss wraps them (TorchRL's losses
    take their device, e.g. ``log_alpha``'s, from the modules' parameters)."""
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torch import nn
    from torchrl.data import Bounded
    from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator

    spec = Bounded(torch.full((act,), low), torch.full((act,), high), (act,),
                   device=None if device.type == "cpu" else device)
    actor_net = nn.Sequential(
        MLP(in_features=obs, out_features=2 * act, num_cells=list(hidden), activation_class=nn.ReLU),
        NormalParamExtractor(scale_mapping="exp"),  # log-std head, as rlfunc's (no clamp: speed-neutral)
    )
    actor = ProbabilisticActor(
        TensorDictModule(actor_net, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"], spec=spec, distribution_class=TanhNormal,
        distribution_kwargs={"low": low, "high": high}, return_log_prob=True,
    )
    critic = ValueOperator(
        MLP(in_features=obs + act, out_features=1, num_cells=list(hidden), activation_class=nn.ReLU),
        in_keys=["observation", "action"],
    )
    return actor.to(device), critic.to(device), spec


class _TorchRLSAC:
    """TorchRL ``REDQLoss`` (N > 2) or ``SACLoss`` (N = 2) with Adam per group and ``SoftUpdate``.

    :meth:`env_step` runs REDQ's schedule over ``G`` mini-batches: ``loss_qvalue``
    only for the first ``G - 1`` (critic Adam), all three losses on the last
    (critic, actor and temperature Adams); a soft target update after each.
    """

    def __init__(self, obs: int, act: int, hidden, critics: int, subset: int, *, compile: bool,
                 low: float = -1.0, high: float = 1.0, device: torch.device = torch.device("cpu")) -> None:
        from torchrl.objectives import REDQLoss, SACLoss, SoftUpdate

        actor, critic, spec = _torchrl_actor_critic(obs, act, hidden, low, high, device)
        self.actor = actor
        if critics == 2 and subset == 2:
            self.loss = SACLoss(actor, critic, num_qvalue_nets=2, loss_function="l2", action_spec=spec)
        else:
            self.loss = REDQLoss(actor, critic, num_qvalue_nets=critics, sub_sample_len=subset,
                                 loss_function="l2", action_spec=spec)
        self.loss.make_value_estimator(gamma=0.99)
        if device.type != "cpu":
            self.loss.to(device)  # anything the loss created off its modules' device (a no-op on CPU)
        self.updater = SoftUpdate(self.loss, tau=0.005)
        self.critic_opt = torch.optim.Adam(list(self.loss.qvalue_network_params.values(True, True)), lr=3e-4)
        self.actor_opt = torch.optim.Adam(list(self.loss.actor_network_params.values(True, True)), lr=3e-4)
        self.alpha_opt = torch.optim.Adam([self.loss.log_alpha], lr=3e-4)
        self.critic_update = torch.compile(self._critic_update) if compile else self._critic_update
        self.full_update = torch.compile(self._full_update) if compile else self._full_update

    def _critic_update(self, td) -> None:
        out = self.loss(td)
        out["loss_qvalue"].backward()
        self.critic_opt.step()
        self.critic_opt.zero_grad(set_to_none=True)
        self.updater.step()

    def _full_update(self, td) -> None:
        out = self.loss(td)
        (out["loss_qvalue"] + out["loss_actor"] + out["loss_alpha"]).backward()
        for opt in (self.critic_opt, self.actor_opt, self.alpha_opt):
            opt.step()
            opt.zero_grad(set_to_none=True)
        self.updater.step()

    def env_step(self, batches) -> None:
        """``batches``: a sequence of ``G`` TorchRL transition TensorDicts of batch ``[B]``."""
        G = len(batches)
        for g in range(G - 1):
            self.critic_update(batches[g])
        self.full_update(batches[G - 1])


def _torchrl_batch(batch):
    """rlfunc's ``[G, B]`` transition batch in TorchRL's layout (``next`` sub-TensorDict, trailing 1-dims)."""
    from tensordict import TensorDict

    term = batch["terminated"].bool().unsqueeze(-1)
    return TensorDict(
        {
            "observation": batch["obs"],
            "action": batch["action"],
            "next": {
                "observation": batch["next_obs"],
                "reward": batch["reward"].unsqueeze(-1),
                "done": term,
                "terminated": term,
            },
        },
        batch_size=batch.batch_size,
    )


# --------------------------------------------------------------------------- task: critic updates


def task_critic_update(task: str, args, run, sz: dict) -> list[dict]:
    from benchmarks.baselines.redq import ImperativeREDQ

    critics, subset = (sz["redq_critics"], sz["redq_subset"]) if task == "redq_critic_update" else (2, 2)
    G, B, H = sz["utd"], sz["batch"], tuple(sz["hidden"])
    ns = argparse.Namespace(obs_dim=sz["obs"], act_dim=sz["act"], utd=G, batch=B, critics=critics,
                            subset=subset, hidden=list(H))
    device = _device(args)
    redq, config, obs_space, act_space, batch, noise = run._redq_problem(ns, device)
    mode = redq.Config().ensemble_mode
    problem = {"critics": critics, "subset": subset, "utd": G, "batch": B, "hidden": list(H),
               "obs_dim": sz["obs"], "act_dim": sz["act"],
               "work_per_call": f"{G} critic updates (target, N-critic fwd/bwd, Adam, polyak) + 1 actor + 1 temperature update",
               "data": "pre-sampled [G, B] batch; no replay"}

    def functional(fn):
        def setup():
            holder = {"state": redq.init(config(mode), obs_space, act_space, seed=0, device=device)}

            def step() -> None:
                holder["state"], _ = fn(holder["state"], batch, noise)

            return step

        return setup

    def imperative():
        # built on the state's device (ImperativeREDQ.from_functional_state reads it off the critic)
        agent = ImperativeREDQ.from_functional_state(redq.init(config(mode), obs_space, act_space, seed=0, device=device))
        return lambda: agent.update(batch, noise)

    name = "REDQLoss" if task == "redq_critic_update" else "SACLoss"

    def torchrl_setup(compiled: bool):
        def setup():
            trl = _TorchRLSAC(sz["obs"], sz["act"], H, critics, subset, compile=compiled, device=device)
            tb = _torchrl_batch(batch)  # on the batch's device
            batches = [tb[g] for g in range(G)]
            return lambda: trl.env_step(batches)

        return setup

    variants = [
        Variant("rlfunc", f"eager (redq.update, ensemble_mode={mode})", functional(redq.update), units=G,
                ensemble_mode=mode),
    ]
    if not args.no_compile:
        variants.append(Variant("rlfunc", "compiled (redq.make_update('step'))", functional(redq.make_update("step")),
                                units=G, compiled=True, ensemble_mode=mode))
    variants.append(Variant("imperative", "benchmarks/baselines/redq.py (N nn.Modules, N+2 Adams)", imperative, units=G))
    missing = _unavailable_peers(("torchrl",))
    variants.append(Variant("torchrl", f"{name} eager", torchrl_setup(False), units=G, unavailable=missing.get("torchrl")))
    if not args.no_compile:
        variants.append(Variant("torchrl", f"{name} + backward + Adam, torch.compile", torchrl_setup(True), units=G,
                                unavailable=missing.get("torchrl"), compiled=True))
    variants.append(Variant("stable-baselines3", "SAC.train (not measured here)", units=G,
                            unavailable="SB3 has no REDQ and no update on given batches; see pendulum_train_loop_utd20"
                            if task == "redq_critic_update" else
                            "SB3's SAC.train samples its own replay inside; compared in pendulum_train_loop_utd20"))
    _measure(variants, args, run)
    return _rows(task, "critic updates/s", problem, variants, args.threads, _device(args).type)


# --------------------------------------------------------------------------- task: Pendulum training loop


def _rlfunc_loop(config_path: str, sz: dict, args, *, compile: bool, agent: dict | None = None):
    """``setup()`` for rlfunc's training loop (the body of ``Trainer.run`` without eval/log/checkpoints)."""

    def setup():
        from rlfunc.runtime.config import apply_overrides, build_config, load_config
        from rlfunc.runtime.trainer import Trainer

        overrides = {
            "train.learning_starts": sz["loop_learning_starts"],
            "train.total_steps": 10**9,
            "train.replay_size": sz["loop_replay"],
            "train.threads": args.threads,
            "train.progress": False,
            "train.compile": compile,
            "train.device": _device(args).type,  # state, replay and sampling on the device; env on the host
            "agent.updates_per_step": sz["loop_utd"],
            "agent.batch_size": sz["loop_batch"],
            "agent.hidden_sizes": list(sz["loop_hidden"]),
            **{f"agent.{k}": v for k, v in (agent or {}).items()},
        }
        cfg = build_config(apply_overrides(load_config(ROOT / config_path), overrides))
        # Trainer creates its run directory only in run() and save(), neither of which is called here.
        trainer = Trainer(cfg, Path(tempfile.gettempdir()) / "rlfunc-peers-never-written")
        learner, collector = trainer.learner, trainer.collector
        collector.reset(seed=cfg.train.seed)

        def env_step() -> None:  # Trainer.run's loop body without logging, evaluation and checkpoints
            trainer._check_finite()  # the last step's updates (one host read per env step)
            actions = learner.explore(collector.obs, trainer.env_step, episode_start=collector.episode_start)
            rows, _ = collector.step(actions)
            learner.observe(rows)
            for _ in range(rows.batch_size[0]):
                trainer.env_step += 1
                if learner.ready(trainer.env_step):
                    trainer._learn()

        for _ in range(sz["loop_learning_starts"] + args.loop_warmup):
            env_step()
        assert trainer.learner_calls >= 1, "learning has not started after the warm-up"
        return lambda: [env_step() for _ in range(args.segment_steps)]

    return setup


def _sb3_loop(sz: dict, args):
    def setup():
        import gymnasium as gym
        from stable_baselines3 import SAC

        model = SAC(
            "MlpPolicy", gym.make("Pendulum-v1"), learning_rate=3e-4, buffer_size=sz["loop_replay"],
            learning_starts=sz["loop_learning_starts"], batch_size=sz["loop_batch"], tau=0.005, gamma=0.99,
            train_freq=1, gradient_steps=sz["loop_utd"], ent_coef="auto",
            policy_kwargs={"net_arch": list(sz["loop_hidden"])}, seed=0, device=_device(args).type, verbose=0,
        )
        torch.set_num_threads(args.threads)
        model.learn(total_timesteps=sz["loop_learning_starts"] + args.loop_warmup)
        assert model._n_updates >= 1, "SB3 has not started learning after the warm-up"
        return lambda: model.learn(total_timesteps=args.segment_steps, reset_num_timesteps=False)

    return setup


def _lazy_storage(cls, capacity: int, device: torch.device):
    """TorchRL's ``LazyTensorStorage(capacity)``, on ``device`` when that is not the CPU (CPU: built as before)."""
    return cls(capacity) if device.type == "cpu" else cls(capacity, device=device)


def _torchrl_loop(sz: dict, args, critics: int, subset: int):
    def setup():
        from torchrl.data import LazyTensorStorage, ReplayBuffer
        from torchrl.envs import ExplorationType, GymEnv, set_exploration_type

        device = _device(args)
        env = GymEnv("Pendulum-v1", device=device)  # gymnasium steps on the host; TorchRL moves each step to device
        env.set_seed(0)
        spec = env.action_spec
        low, high = float(spec.space.low.min()), float(spec.space.high.max())
        obs_dim = env.observation_spec["observation"].shape[-1]
        trl = _TorchRLSAC(obs_dim, spec.shape[-1], tuple(sz["loop_hidden"]), critics, subset, compile=False,
                          low=low, high=high, device=device)
        rb = ReplayBuffer(storage=_lazy_storage(LazyTensorStorage, sz["loop_replay"], device), batch_size=sz["loop_batch"])
        G = sz["loop_utd"]
        state = {"td": env.reset(), "steps": 0}

        def env_step() -> None:
            td = state["td"]
            if state["steps"] < sz["loop_learning_starts"]:
                td = env.rand_action(td)
            else:
                with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
                    td = trl.actor(td)
            out, state["td"] = env.step_and_maybe_reset(td)
            rb.add(out.exclude("loc", "scale", "action_log_prob", "sample_log_prob"))
            state["steps"] += 1
            if state["steps"] >= sz["loop_learning_starts"]:
                trl.env_step([rb.sample() for _ in range(G)])

        for _ in range(sz["loop_learning_starts"] + args.loop_warmup):
            env_step()
        return lambda: [env_step() for _ in range(args.segment_steps)]

    return setup


def task_pendulum_loop(task: str, args, run, sz: dict) -> list[dict]:
    G = sz["loop_utd"]
    problem = {"env": "Pendulum-v1", "utd": G, "batch": sz["loop_batch"], "hidden": list(sz["loop_hidden"]),
               "learning_starts": sz["loop_learning_starts"], "warmup_learning_steps": args.loop_warmup,
               "segment_env_steps": args.segment_steps,
               "work_per_env_step": f"act + env step + store + sample + {G} critic updates (+ actor, temperature)"}
    missing = _unavailable_peers(("torchrl", "stable-baselines3"))
    redq_n, redq_m = sz["redq_critics"], sz["redq_subset"]
    problem["redq_critics"], problem["redq_subset"] = redq_n, redq_m
    redq_agent = {"num_critics": redq_n, "subset_size": redq_m}
    device = _device(args)
    on_dev = device.type != "cpu"
    if on_dev:
        problem["env_on"] = "host (gymnasium Pendulum-v1 steps on the CPU for every library)"
    sb3_note = {"note": f"SB3 SAC with device='{device.type}': networks and updates on {device.type}; its ReplayBuffer "
                        f"stores numpy arrays on the host and copies every sampled batch to {device.type} "
                        "(SB3's real behaviour, measured as is)"} if on_dev else {}
    trl_note = {"note": f"GymEnv(device='{device.type}') steps gymnasium on the host and moves each step to "
                        f"{device.type}; LazyTensorStorage(device='{device.type}'); loss and modules on {device.type}"
                } if on_dev else {}
    rl_note = {"note": f"train.device={device.type}: state, replay and sampling on {device.type}; env on the host"
               } if on_dev else {}
    variants = [
        Variant("rlfunc", f"REDQ N={redq_n} eager (configs/redq/pendulum.yaml)",
                _rlfunc_loop("configs/redq/pendulum.yaml", sz, args, compile=False, agent=redq_agent), units=args.segment_steps,
                algo="redq", critics=redq_n, **rl_note),
        Variant("rlfunc", "SAC N=2 eager (configs/sac/pendulum.yaml, updates_per_step=G)",
                _rlfunc_loop("configs/sac/pendulum.yaml", sz, args, compile=False), units=args.segment_steps,
                algo="sac", critics=2, **rl_note),
    ]
    if not args.no_compile:
        variants.append(Variant("rlfunc", f"REDQ N={redq_n} compiled (train.compile=true, compile_mode=step)",
                                _rlfunc_loop("configs/redq/pendulum.yaml", sz, args, compile=True, agent=redq_agent),
                                units=args.segment_steps, compiled=True, algo="redq", critics=redq_n, **rl_note))
    variants += [
        Variant("stable-baselines3", f"SAC N=2 (gradient_steps={G}, train_freq=1)", _sb3_loop(sz, args),
                units=args.segment_steps, unavailable=missing.get("stable-baselines3"), algo="sac", critics=2, **sb3_note),
        Variant("torchrl", f"REDQ N={redq_n} loop from components (recipe not shipped in the wheel)",
                _torchrl_loop(sz, args, redq_n, redq_m), units=args.segment_steps,
                unavailable=missing.get("torchrl"), algo="redq", critics=redq_n, **trl_note),
    ]
    _measure(variants, args, run, fixed_steps=True)
    return _rows(task, "env steps/s", problem, variants, args.threads, _device(args).type)


# --------------------------------------------------------------------------- task: DRQN sequence update


class _TorchRLDRQN:
    """TorchRL DQN on an LSTM: encoder -> ``LSTMModule`` (recurrent mode) -> head -> ``QValueModule``; ``DQNLoss``."""

    def __init__(self, sz: dict, *, compile: bool, device: torch.device = torch.device("cpu")) -> None:
        from tensordict.nn import TensorDictModule, TensorDictSequential
        from torch import nn
        from torchrl.data import OneHot
        from torchrl.modules import LSTMModule, QValueModule
        from torchrl.objectives import DQNLoss, HardUpdate

        O, A, E, H = sz["drqn_obs"], sz["drqn_actions"], sz["drqn_encoder"], sz["drqn_lstm"]
        enc = TensorDictModule(nn.Sequential(nn.Linear(O, E), nn.ReLU()), in_keys=["observation"], out_keys=["embed"])
        lstm = LSTMModule(input_size=E, hidden_size=H, in_key="embed", out_key="features", default_recurrent_mode=True)
        head = TensorDictModule(nn.Linear(H, A), in_keys=["features"], out_keys=["action_value"])
        spec = OneHot(A, device=None if device.type == "cpu" else device)
        policy = TensorDictSequential(enc, lstm, head, QValueModule(spec=spec)).to(device)  # before the loss wraps it
        self.loss = DQNLoss(policy, action_space=spec, delay_value=True, loss_function="smooth_l1")
        self.loss.make_value_estimator(gamma=0.99)
        if device.type != "cpu":
            self.loss.to(device)
        self.updater = HardUpdate(self.loss, value_network_update_interval=1000)
        self.opt = torch.optim.Adam(self.loss.parameters(), lr=1e-3)
        self.update = torch.compile(self._update) if compile else self._update

    def _update(self, td) -> None:
        out = self.loss(td)
        out["loss"].backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.updater.step()

    @staticmethod
    def batch(batch, sz: dict):
        """rlfunc's time-major window batch as TorchRL's batch-major ``[B, T]`` one, zero stored states."""
        from tensordict import TensorDict

        T, B, A, H = sz["drqn_window"], sz["drqn_batch"], sz["drqn_actions"], sz["drqn_lstm"]

        def bm(x):
            return x.transpose(0, 1).contiguous()

        is_init = torch.zeros(B, T, 1, dtype=torch.bool)
        is_init[:, 0] = True
        zeros = torch.zeros(B, T, 1, H)
        term = bm(batch["terminated"]).unsqueeze(-1)
        return TensorDict(
            {
                "observation": bm(batch["obs"]),
                "action": torch.nn.functional.one_hot(bm(batch["action"]), A),
                "is_init": is_init,
                "recurrent_state_h": zeros,
                "recurrent_state_c": zeros.clone(),
                "next": {
                    "observation": bm(batch["next_obs"]),
                    "reward": bm(batch["reward"]).unsqueeze(-1),
                    "is_init": torch.zeros(B, T, 1, dtype=torch.bool),
                    "recurrent_state_h": zeros.clone(),
                    "recurrent_state_c": zeros.clone(),
                    "done": term,
                    "terminated": term.clone(),
                },
            },
            batch_size=[B, T],
        )


def task_sequence_update(task: str, args, run, sz: dict) -> list[dict]:
    import gymnasium as gym

    from benchmarks.baselines.drqn import ImperativeDRQN
    from rlfunc.algos import drqn

    T, B, O, A = sz["drqn_window"], sz["drqn_batch"], sz["drqn_obs"], sz["drqn_actions"]
    config = drqn.Config(lstm_size=sz["drqn_lstm"], sequence_length=T, batch_size=B, encoder_sizes=(sz["drqn_encoder"],))
    obs_space = gym.spaces.Box(-np.inf, np.inf, (O,), np.float32)
    act_space = gym.spaces.Discrete(A)
    device = _device(args)
    batch_host = run.drqn_batch(T, B, O, A)  # built on the CPU (seeded), then moved
    batch = batch_host if device.type == "cpu" else batch_host.to(device)
    problem = {"batch": B, "window": T, "lstm_size": sz["drqn_lstm"], "encoder_sizes": [sz["drqn_encoder"]],
               "obs_dim": O, "num_actions": A, "work_per_call": "1 update: online + target unroll, Huber TD, Adam, target copy",
               "data": "pre-sampled window batch with padded tails; no replay"}

    def functional(fn):
        def setup():
            holder = {"state": drqn.init(config, obs_space, act_space, seed=0, device=device)}

            def step() -> None:
                holder["state"], _ = fn(holder["state"], batch)

            return step

        return setup

    def imperative():
        agent = ImperativeDRQN.from_functional(drqn.init(config, obs_space, act_space, seed=0), config)
        if device.type != "cpu":  # as `update --algo drqn`: modules moved in place (Adam keeps the same Parameters)
            agent.q.to(device)
            agent.target.to(device)
        return lambda: agent.update(batch)

    def torchrl_setup(compiled: bool):
        def setup():
            trl = _TorchRLDRQN(sz, compile=compiled, device=device)
            tb = _TorchRLDRQN.batch(batch_host, sz)
            tb = tb if device.type == "cpu" else tb.to(device)
            return lambda: trl.update(tb)

        return setup

    missing = _unavailable_peers(("torchrl",))
    variants = [Variant("rlfunc", "eager (drqn.update)", functional(drqn.update))]
    if not args.no_compile:
        variants.append(Variant("rlfunc", "compiled (torch.compile(drqn.update, fullgraph=True))",
                                functional(torch.compile(drqn.update, fullgraph=True)), compiled=True))
    variants.append(Variant("imperative", "benchmarks/baselines/drqn.py (nn.LSTM, torch.optim.Adam)", imperative))
    variants.append(Variant("torchrl", "DQNLoss on LSTMModule, eager", torchrl_setup(False),
                            unavailable=missing.get("torchrl")))
    if not args.no_compile:
        variants.append(Variant("torchrl", "DQNLoss on LSTMModule + backward + Adam, torch.compile", torchrl_setup(True),
                                unavailable=missing.get("torchrl"), compiled=True))
    variants.append(Variant("stable-baselines3", "-", unavailable="SB3 has no recurrent off-policy (DRQN/R2D2) learner"))
    _measure(variants, args, run)
    return _rows(task, "updates/s", problem, variants, args.threads, _device(args).type)


# --------------------------------------------------------------------------- task: replay sampling


def _transitions(n: int, obs: int, act: int):
    from tensordict import TensorDict

    g = torch.Generator().manual_seed(0)
    return TensorDict(
        {
            "obs": torch.randn(n, obs, generator=g),
            "action": torch.rand(n, act, generator=g) * 2 - 1,
            "reward": torch.randn(n, generator=g),
            "next_obs": torch.randn(n, obs, generator=g),
            "terminated": (torch.rand(n, generator=g) < 0.01).float(),
        },
        batch_size=[n],
    )


def task_replay_sample(task: str, args, run, sz: dict) -> list[dict]:
    from tensordict import TensorDict

    from rlfunc.replay.prioritized import PrioritizedSequenceReplay
    from rlfunc.replay.uniform import UniformReplay

    C, B, O, A = sz["replay_capacity"], sz["replay_batch"], sz["obs"], sz["act"]
    device = _device(args)
    data = _transitions(C, O, A)  # host data, stored into each buffer (on ``device`` where the buffer supports it)
    problem = {"stored_transitions": C, "batch": B, "obs_dim": O, "act_dim": A,
               "keys": "obs, action, reward, next_obs, terminated (float32)", "work_per_call": f"sample {B} transitions"}

    def rl_uniform():
        rb = UniformReplay(C, device=device)
        rb.add(data)
        g = torch.Generator(device=device).manual_seed(1)  # sampling draws its indices on ``device``
        return lambda: rb.sample(B, generator=g)

    def rl_prioritized():
        envs = 1000 if C % 1000 == 0 else 100
        rb = PrioritizedSequenceReplay(C, 1, num_envs=envs, period=1, device=device)
        zeros = torch.zeros(envs, dtype=torch.bool)
        for i in range(C // envs):
            rows = data[i * envs:(i + 1) * envs]
            rb.add(TensorDict({**rows.to_dict(), "truncated": zeros}, batch_size=[envs]))
        g = torch.Generator().manual_seed(1)
        rb.update_priorities(torch.arange(C), torch.rand(C, generator=g) * 10)
        gen = g if device.type == "cpu" else torch.Generator(device=device).manual_seed(1)  # sampling's, on device
        return lambda: rb.sample(B, generator=gen)

    def sb3_uniform():
        import gymnasium as gym
        from stable_baselines3.common.buffers import ReplayBuffer

        # SB3 stores numpy arrays on the host whatever ``device`` is; sample() copies the batch to ``device``
        rb = ReplayBuffer(C, gym.spaces.Box(-np.inf, np.inf, (O,), np.float32), gym.spaces.Box(-1, 1, (A,), np.float32),
                          device=device.type, n_envs=1)
        arrays = {k: v.numpy() for k, v in data.items()}
        info = [{}]
        for i in range(C):
            rb.add(arrays["obs"][i:i + 1], arrays["next_obs"][i:i + 1], arrays["action"][i:i + 1],
                   arrays["reward"][i:i + 1], arrays["terminated"][i:i + 1], info)
        return lambda: rb.sample(B)

    def trl_uniform():
        from torchrl.data import LazyTensorStorage, ReplayBuffer

        rb = ReplayBuffer(storage=_lazy_storage(LazyTensorStorage, C, device), batch_size=B)
        rb.extend(data)
        return lambda: rb.sample()

    def trl_prioritized():
        from torchrl.data import LazyTensorStorage, PrioritizedReplayBuffer

        rb = _torchrl_prioritized(lambda: PrioritizedReplayBuffer(
            alpha=0.9, beta=0.6, storage=_lazy_storage(LazyTensorStorage, C, device), batch_size=B))
        rb.extend(data)
        return lambda: rb.sample()

    missing = _unavailable_peers(("torchrl", "stable-baselines3"))
    on_dev = device.type != "cpu"
    if on_dev:
        problem["storage"] = (f"rlfunc and TorchRL store on {device.type} (rlfunc device=, LazyTensorStorage(device=)); "
                              f"SB3 stores numpy on the host and copies each sample to {device.type}")
    sb3_note = {"note": f"SB3's ReplayBuffer(device='{device.type}') stores numpy arrays on the host and copies every "
                        f"sampled batch to {device.type} (its real behaviour, measured as is)"} if on_dev else {}
    variants = [
        Variant("rlfunc", "UniformReplay", rl_uniform),
        Variant("rlfunc", "PrioritizedSequenceReplay, 1-step windows (prioritized transitions)", rl_prioritized,
                prioritized=True),
        Variant("stable-baselines3", "ReplayBuffer (numpy storage, returns torch tensors)", sb3_uniform,
                unavailable=missing.get("stable-baselines3"), **sb3_note),
        Variant("torchrl", "ReplayBuffer(LazyTensorStorage)", trl_uniform, unavailable=missing.get("torchrl")),
        Variant("torchrl", "PrioritizedReplayBuffer(LazyTensorStorage)", trl_prioritized,
                unavailable=missing.get("torchrl"), prioritized=True),
    ]
    _measure(variants, args, run)
    return _rows(task, "batches/s", problem, variants, args.threads, _device(args).type)


def task_replay_sample_sequence(task: str, args, run, sz: dict) -> list[dict]:
    from tensordict import TensorDict

    from rlfunc.replay.prioritized import PrioritizedSequenceReplay
    from rlfunc.replay.sequence import SequenceReplay

    C, T, B, L = sz["replay_capacity"], sz["seq_window"], sz["seq_batch"], sz["seq_episode"]
    O = sz["drqn_obs"]
    device = _device(args)
    envs = C // L  # envs in lockstep, one episode of L steps each
    g = torch.Generator().manual_seed(0)
    obs = torch.randn(L, envs, O, generator=g)
    problem = {"stored_transitions": envs * L, "episode_length": L, "window": T, "batch_windows": B, "obs_dim": O,
               "keys": "obs, action (int64), reward, next_obs, terminated, truncated",
               "work_per_call": f"sample {B} windows of {T} steps"}

    def step_td(t: int) -> TensorDict:
        last = torch.full((envs,), t == L - 1)
        return TensorDict(
            {"obs": obs[t], "action": torch.randint(2, (envs,), generator=g), "reward": obs[t, :, 0],
             "next_obs": obs[t] + 1, "terminated": torch.zeros(envs, dtype=torch.bool), "truncated": last},
            batch_size=[envs],
        )

    steps = [step_td(t) for t in range(L)]

    def rl(cls):
        def setup():
            rb = cls(C // T, T, num_envs=envs, period=T, device=device)
            for td in steps:
                rb.add(td)
            if hasattr(rb, "update_priorities"):
                rb.update_priorities(torch.arange(len(rb)), torch.rand(len(rb), generator=g) * 10)
            gen = torch.Generator(device=device).manual_seed(1)  # sampling draws its indices on ``device``
            return lambda: rb.sample(B, generator=gen)

        return setup

    def trl(prioritized: bool):
        def setup():
            from torchrl.data import LazyTensorStorage, ReplayBuffer
            from torchrl.data.replay_buffers import PrioritizedSliceSampler, SliceSampler

            flat = torch.stack(steps, 0).transpose(0, 1).reshape(envs * L)  # episode-contiguous
            flat["episode"] = torch.arange(envs).repeat_interleave(L)
            if prioritized:
                sampler = _torchrl_prioritized(lambda: PrioritizedSliceSampler(
                    max_capacity=envs * L, alpha=0.9, beta=0.6, slice_len=T, traj_key="episode"))
            else:
                sampler = SliceSampler(slice_len=T, traj_key="episode")
            rb = ReplayBuffer(storage=_lazy_storage(LazyTensorStorage, envs * L, device), sampler=sampler, batch_size=B * T)
            rb.extend(flat)
            return lambda: rb.sample()

        return setup

    missing = _unavailable_peers(("torchrl",))
    variants = [
        Variant("rlfunc", "SequenceReplay", rl(SequenceReplay)),
        Variant("rlfunc", "PrioritizedSequenceReplay", rl(PrioritizedSequenceReplay), prioritized=True),
        Variant("torchrl", "ReplayBuffer(LazyTensorStorage, SliceSampler)", trl(False), unavailable=missing.get("torchrl")),
        Variant("torchrl", "ReplayBuffer(LazyTensorStorage, PrioritizedSliceSampler)", trl(True),
                unavailable=missing.get("torchrl"), prioritized=True),
        Variant("stable-baselines3", "-", unavailable="SB3 has no sequence replay (sb3-contrib's recurrent buffers are on-policy rollouts)"),
    ]
    _measure(variants, args, run)
    return _rows(task, "batches/s", problem, variants, args.threads, _device(args).type)


TASK_FNS: dict[str, Callable[..., list[dict]]] = {
    "redq_critic_update": task_critic_update,
    "sac_critic_update": task_critic_update,
    "pendulum_train_loop_utd20": task_pendulum_loop,
    "sequence_update": task_sequence_update,
    "replay_sample": task_replay_sample,
    "replay_sample_sequence": task_replay_sample_sequence,
}


# --------------------------------------------------------------------------- output


COLORS = {"rlfunc": "#1f77b4", "imperative": "#7f7f7f", "torchrl": "#d62728", "stable-baselines3": "#2ca02c"}


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def plot(rows: list[dict], path: Path, title: str) -> Path | None:
    """One horizontal-bar panel per task; unavailable rows are labelled 'n/a'."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG written.", flush=True)
        return None
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    heights = [max(1.5, 0.4 * sum(r["task"] == t for r in rows) + 0.8) for t in tasks]
    fig, axes = plt.subplots(len(tasks), 1, figsize=(12, sum(heights)), gridspec_kw={"height_ratios": heights},
                             squeeze=False)
    for ax, task in zip(axes[:, 0], tasks):
        sub = [r for r in rows if r["task"] == task]
        labels = [_short(f"{r['library']}: {r['variant']}", 55) for r in sub]
        vals = [r["throughput"] or 0.0 for r in sub]
        y = list(range(len(sub)))[::-1]
        ax.barh(y, vals, color=[COLORS.get(r["library"], "#999999") for r in sub])
        ax.set_yticks(y, labels, fontsize=7)
        top = max(vals) if any(vals) else 1.0
        for yi, r, v in zip(y, sub, vals):
            text = "n/a: " + _short(r.get("unavailable", ""), 60) if r["throughput"] is None else f"{v:.3g}" + (
                f" ({r['ratio_vs_rlfunc']:.2f}x)" if r.get("ratio_vs_rlfunc") is not None else "")
            ax.text(v + 0.01 * top, yi, text, va="center", fontsize=7)
        ax.set_xlim(0, top * 1.3)
        dev = sub[0].get("device", "cpu")
        ax.set_title(f"{task} ({sub[0]['unit']}, {sub[0]['threads']} thread(s)" + (f", {dev})" if dev != "cpu" else ")"),
                     fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- CLI


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads for every variant (default 1)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="device of every variant's state, batches and buffers (default cpu); "
                        "cuda writes benchmarks/results/peers_cuda.json by default")
    p.add_argument("--quick", action="store_true", help="2 short windows and 2-step loop segments: a smoke test")
    p.add_argument("--tiny", action="store_true", help="tiny shapes (tests); every row's 'problem' records the shapes")
    p.add_argument("--only", nargs="+", choices=TASKS, default=None, metavar="TASK",
                   help="run only these tasks: " + ", ".join(TASKS))
    p.add_argument("--no-compile", action="store_true", help="skip every torch.compile row (rlfunc and peers)")
    p.add_argument("--repeats", type=int, default=None, help="timed windows per variant (default 5; 2 with --quick)")
    p.add_argument("--window-s", type=float, default=None, help="seconds per window (default 1.0; 0.05 with --quick)")
    p.add_argument("--segment-steps", type=int, default=None,
                   help="env steps per timed window of the training loop (default 30; 2 with --quick)")
    p.add_argument("--loop-repeats", type=int, default=None,
                   help="timed segments per training-loop variant (default 3; 2 with --quick)")
    p.add_argument("--loop-warmup", type=int, default=None,
                   help="learning env steps run before timing the loop (default 3; 1 with --quick)")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON path (default benchmarks/results/peers.json, peers_cuda.json with --device cuda); PNG beside it")
    p.add_argument("--note", default=None, help="free text stored in the JSON")
    p.add_argument("--traceback", action="store_true", help="print the traceback of every failing variant")


def _command(args: argparse.Namespace) -> str:
    flags = [f"--threads {args.threads}"] + [f"--device {args.device}"] * (_device(args).type != "cpu")
    flags += ["--quick"] * bool(args.quick) + ["--tiny"] * bool(args.tiny) + ["--no-compile"] * bool(args.no_compile)
    if args.only:
        flags.append("--only " + " ".join(args.only))
    return "python benchmarks/run.py peers " + " ".join(flags)


def _failed_task_row(task: str, exc: BaseException, threads: int, device: str) -> dict:
    """The row of a task that raised outside its variants' guards (e.g. a CUDA error surfacing at a sync)."""
    return {"task": task, "library": "rlfunc", "variant": "(whole task)", "throughput": None, "unit": "-",
            "ratio_vs_rlfunc": None, "threads": threads, "device": device, "versions": _versions("rlfunc"),
            "problem": {}, "unavailable": f"the task failed: {_reason(exc)}"}


def run_peers(args: argparse.Namespace, run) -> int:
    from rlfunc.runtime.perf import tune_allocator

    if getattr(args, "device", None) is None:
        args.device = "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: no CUDA device is available here.", file=sys.stderr)
        return 2
    device = _device(args)

    if args.repeats is None:
        args.repeats = 2 if args.quick else 5
    if args.window_s is None:
        args.window_s = 0.05 if args.quick else 1.0
    if args.segment_steps is None:
        args.segment_steps = 2 if args.quick else 30
    if args.loop_repeats is None:
        args.loop_repeats = 2 if args.quick else 3
    if args.loop_warmup is None:
        args.loop_warmup = 1 if args.quick else 3
    allocator_tuned = tune_allocator()  # process-wide: every library in this process gets it
    torch.set_num_threads(args.threads)
    sz = SIZES["tiny" if args.tiny else "full"]
    tasks = [t for t in TASKS if args.only is None or t in args.only]
    peers = {lib: (_peer(lib)[1] or "installed") for lib in _PEER_MODULES}
    machine = run.machine_info(device, allocator_tuned)
    where = run.cpu_model() if device.type == "cpu" else f"{machine.get('gpu', device.type)} ({device.type}; host {run.cpu_model()})"
    print(f"peers on {where}, threads={args.threads}, tasks={tasks}, sizes={'tiny' if args.tiny else 'full'}; "
          + ", ".join(f"{k}: {v}" for k, v in peers.items()), flush=True)
    rows: list[dict] = []
    for task in tasks:
        print(f"{task}:", flush=True)
        t0 = time.perf_counter()
        try:
            rows += TASK_FNS[task](task, args, run, sz)
        except Exception as exc:  # noqa: BLE001 -- one task's failure must not lose the others' rows
            print(f"  TASK FAILED: {task}: {_reason(exc)}", flush=True)
            if getattr(args, "traceback", False):
                traceback.print_exc()
            rows.append(_failed_task_row(task, exc, args.threads, device.type))
        torch.set_num_threads(args.threads)  # a peer may have changed it
        print(f"  {task} done in {time.perf_counter() - t0:.0f} s", flush=True)
    result = {
        "machine": machine,
        "rows": rows,
        "settings": {
            "command": _command(args),
            "threads": args.threads,
            "device": device.type,
            "sizes": "tiny" if args.tiny else "full",
            "repeats": args.repeats,
            "window_s": args.window_s,
            "segment_steps": args.segment_steps,
            "loop_warmup": args.loop_warmup,
            "loop_repeats": args.loop_repeats,
            "compile": not args.no_compile,
            "statistic": "median of interleaved windows; ratio_vs_rlfunc = throughput / best rlfunc row of the task",
            "peers": peers,
        },
    }
    if args.quick:
        result["quick"] = True
    if args.note:
        result["note"] = args.note
    out = args.out or run.RESULTS_DIR / ("peers.json" if device.type == "cpu" else f"peers_{device.type}.json")
    run.write_json(out, result)
    on = f"{machine['cpu']}" if device.type == "cpu" else f"{device.type}: {machine.get('gpu', '?')}, host {machine['cpu']}"
    png = plot(rows, out.with_suffix(".png"),
               title=f"rlfunc vs peers ({args.threads} thread(s), {on}; "
                     f"{'tiny shapes, ' if args.tiny else ''}{'quick' if args.quick else 'median of windows'})")
    print()
    table = [dict(r, unavailable=(r.get("unavailable") or "")[:70]) for r in rows]
    run.print_table(table, [("task", "task", ""), ("library", "library", ""), ("variant", "variant", ""),
                            ("throughput", "throughput", ".4g"), ("unit", "unit", ""),
                            ("vs rlfunc", "ratio_vs_rlfunc", ".2f"), ("unavailable", "unavailable", "")])
    print(f"\nwrote {out}" + (f" and {png}" if png else ""))
    return 0


def register(run) -> None:
    """Add the ``peers`` subcommand to ``benchmarks/run.py`` (``run`` is that module)."""
    run.subcommand("peers", "rlfunc side by side with Stable-Baselines3 and TorchRL (same shapes, threads, process)",
                   configure)(lambda args: run_peers(args, run))


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run it as: python benchmarks/run.py peers [--quick]")
