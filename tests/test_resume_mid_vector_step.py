"""A checkpoint inside one vector env step: the resumed run counts the stored rows first.

With ``env.num_envs > 1`` one env step of the vector env stores a row for each copy, and the loop
counts them one env step at a time (updates, ``on_step`` rules, logs, evaluations, checkpoints at
exact counts). A checkpoint written between two of those counts (``checkpoint_every`` not a
multiple of ``num_envs``, a stop, a crash, ``train.total_steps``) held rows in its replay that its
``env_step`` did not count, and a resume stepped the envs again at once: those rows were never
counted, the updates, evaluations and checkpoints after them shifted, and the run collected more
env steps than ``train.total_steps``. The checkpoint now records them (``pending_env_steps``) and
the resumed run counts them before stepping the envs.

Envs are reset on resume (a simulator's state is not saved), so a resumed run continues exactly only
where the uninterrupted run's next env step resets every copy too. The runs here use Pendulum with
6-step episodes (its reset draws from the env's RNG only), so every copy's episode ends at once
every 6 vector steps (24 rows) and the next vector step is the autoreset step: a checkpoint at step
22 falls inside the vector step that ends those episodes (rows 21-24), and the resumed run must
equal the uninterrupted one bit for bit. Where the checkpoint falls mid-episode (step 6), the data
differ after the resume point; what must still match is compared: the updates at each env step,
the replay's rows at each env step, and the parameters at the end of the interrupted vector step.
"""

import csv
import json

import pytest
import torch

import rlfunc
from rlfunc.runtime.checkpoint import CheckpointError, load_checkpoint, meta_checksum


def _config(total=72, checkpoint_every=22, episode=6, seeds=None, **train):
    wrappers = [{"time_limit": {"max_episode_steps": episode}}] if episode else []
    config = {
        "algo": "sac",
        "env": {"id": "Pendulum-v1", "num_envs": 4, "wrappers": wrappers},
        "train": {"total_steps": total, "learning_starts": 8, "replay_size": 500, "eval_every": 36,
                  "eval_episodes": 1, "checkpoint_every": checkpoint_every, "log_every": 12, "progress": False,
                  "tensorboard": False, "threads": 1, "keep_checkpoints": 10, **train},
        "agent": {"hidden_sizes": [16, 16], "batch_size": 8},
    }
    if seeds is not None:
        config["train"]["population"] = {"seeds": seeds}
    return config


class Trace(rlfunc.Callback):
    """Per counted env step: (env step, learner calls, rows in the replay); parameters at chosen steps."""

    def __init__(self, keep_params_at=()):
        self.rows, self.params, self.keep = [], {}, set(keep_params_at)

    def on_step(self, run):
        self.rows.append((run.env_step, run.learner_calls, len(run.learner.replay)))
        if run.env_step in self.keep:
            self.params[run.env_step] = run.learner.state["params"].clone()


class Killed(Exception):
    pass


class KillAtFirstCheckpoint(rlfunc.Callback):
    """A crash right after the first periodic checkpoint (what a kill there leaves)."""

    def on_checkpoint(self, run, path):
        raise Killed(str(path))


def _assert_same_tensors(a, b):
    keys = set(a.keys(True, True))
    assert keys == set(b.keys(True, True))
    assert [k for k in sorted(keys, key=str) if not torch.equal(a[k], b[k])] == []


def _metrics(run_dir, path="metrics.csv"):
    """metrics.csv without its clock columns."""
    with open(run_dir / path) as f:
        return [{k: v for k, v in row.items() if k not in ("time_s", "steps_per_s")} for row in csv.DictReader(f)]


def _crash_then_resume(tmp_path, config, keep_params_at=()):
    straight, cut = tmp_path / "straight", tmp_path / "cut"
    whole = Trace(keep_params_at)
    rlfunc.train(config, run_dir=straight, callbacks=[whole])
    with pytest.raises(Killed):
        rlfunc.train(config, run_dir=cut, callbacks=[Trace(), KillAtFirstCheckpoint()])
    resumed = Trace(keep_params_at)
    result = rlfunc.resume(cut, callbacks=[resumed])
    return straight, cut, whole, resumed, result


def test_a_checkpoint_inside_a_vector_step_records_its_uncounted_rows_and_the_resume_counts_them(tmp_path):
    config = _config()
    straight, cut, whole, resumed, result = _crash_then_resume(tmp_path, config)
    tensors, meta = load_checkpoint(cut / "checkpoints" / "step_000000022")
    assert meta["env_step"] == 22 and meta["pending_env_steps"] == 2  # rows 23 and 24 stored, not counted
    # the resumed run counts 23 and 24 without stepping the envs: each step's updates and replay rows as uninterrupted
    assert resumed.rows[:2] == [(23, 16, 24), (24, 17, 24)]
    assert resumed.rows == [r for r in whole.rows if r[0] > 22]
    assert result.env_steps == 72 and result.gradient_steps == whole.rows[-1][1]
    assert all(rows == step for step, _, rows in resumed.rows if step % 4 == 0)  # no row past the count
    # the next env step is the autoreset step in both runs: the resumed run is the uninterrupted one, bit for bit
    a, meta_a = load_checkpoint(straight / "checkpoints" / "step_000000072")
    b, meta_b = load_checkpoint(cut / "checkpoints" / "step_000000072")
    _assert_same_tensors(a, b)
    assert meta_a["pending_env_steps"] == meta_b["pending_env_steps"] == 0
    assert meta_a["evals"] == meta_b["evals"] and meta_a["episodes"] == meta_b["episodes"]
    assert [int(p.name[5:]) for p in sorted((cut / "checkpoints").glob("step_*"))] == [22, 44, 66, 72]
    # metrics.csv continues as the uninterrupted run's (episode_return over the episodes before the resume too)
    assert _metrics(cut) == _metrics(straight)
    assert _metrics(cut, "eval.csv") == _metrics(straight, "eval.csv")


def test_a_learner_that_updates_before_the_env_step_does_no_update_for_the_pending_rows(tmp_path, monkeypatch):
    """DrQ-v2's order (``learns_before_env_step``: one update per vector env step, before it). DrQ-v2 itself
    trains on one env; its order is forced onto SAC here so that a vector step's rows can be pending."""
    from rlfunc.runtime.learners import TransitionLearner

    monkeypatch.setattr(TransitionLearner, "learns_before_env_step", True, raising=False)
    config = _config()
    straight, cut, whole, resumed, result = _crash_then_resume(tmp_path, config)
    assert load_checkpoint(cut / "checkpoints" / "step_000000022")[1]["pending_env_steps"] == 2
    calls = [c for s, c, _ in whole.rows if s == 22][0]
    assert resumed.rows[:2] == [(23, calls, 24), (24, calls, 24)]  # the vector step's update came before it
    assert resumed.rows == [r for r in whole.rows if r[0] > 22]
    assert result.gradient_steps == whole.rows[-1][1]
    final = [load_checkpoint(run_dir / "checkpoints" / "step_000000072")[0] for run_dir in (straight, cut)]
    _assert_same_tensors(*final)


def test_a_checkpoint_mid_episode_and_mid_vector_step_resumes_with_the_same_counts(tmp_path):
    """checkpoint_every 6 with 4 envs: the checkpoint at step 6 holds rows 7 and 8 uncounted, mid-episode
    (Pendulum's 200 steps). The envs restart on resume, so the data differ from step 9 on; the updates and
    replay rows at every step match, and so do the parameters at step 8, the end of the interrupted vector step."""
    config = _config(total=40, checkpoint_every=6, episode=None, learning_starts=4)
    straight, cut, whole, resumed, result = _crash_then_resume(tmp_path, config, keep_params_at=(8,))
    assert load_checkpoint(cut / "checkpoints" / "step_000000006")[1]["pending_env_steps"] == 2
    assert resumed.rows == [r for r in whole.rows if r[0] > 6]
    assert result.env_steps == 40 and result.gradient_steps == whole.rows[-1][1]
    assert resumed.rows[-1] == (40, whole.rows[-1][1], 40)  # every stored row counted, none past the end
    _assert_same_tensors(whole.params[8], resumed.params[8])
    meta = load_checkpoint(cut)[1]
    assert meta["env_step"] == 40 and meta["pending_env_steps"] == 0 and meta["updates"] == whole.rows[-1][1]


def test_a_run_ended_inside_a_vector_step_counts_its_pending_rows_when_resumed_with_a_larger_budget(tmp_path):
    """``train.total_steps`` (22 with 4 envs) and a stopping rule end a run inside a vector step; the final
    checkpoint records the rows past the end, and ``resume(total_steps=...)`` counts them first."""
    config = _config()
    straight, short, stopped = tmp_path / "straight", tmp_path / "short", tmp_path / "stopped"
    whole = Trace()
    rlfunc.train(config, run_dir=straight, callbacks=[whole])
    first = rlfunc.train(_config(total=22), run_dir=short)
    assert first.env_steps == 22
    assert load_checkpoint(short)[1]["pending_env_steps"] == 2
    assert rlfunc.resume(short).env_steps == 22  # a finished run: nothing to count, the rows stay pending
    assert load_checkpoint(short)[1]["pending_env_steps"] == 2

    class StopAt22(rlfunc.Callback):
        def on_step(self, run):
            return "enough" if run.env_step == 22 else None

    assert rlfunc.train(config, run_dir=stopped, callbacks=[StopAt22()]).stop_reason == "enough"
    assert load_checkpoint(stopped)[1]["pending_env_steps"] == 2
    final = load_checkpoint(straight / "checkpoints" / "step_000000072")[0]
    for run_dir, total in ((short, 72), (stopped, None)):
        trace = Trace()
        result = rlfunc.resume(run_dir, total_steps=total, callbacks=[trace])
        assert trace.rows == [r for r in whole.rows if r[0] > 22]
        assert result.env_steps == 72 and result.gradient_steps == whole.rows[-1][1]
        # the final evaluation of the shorter run (at 22) reads no generator: the rest is the uninterrupted run's
        _assert_same_tensors(final, load_checkpoint(run_dir / "checkpoints" / "step_000000072")[0])


def test_checkpoints_without_pending_env_steps_still_resume_and_a_bad_count_is_refused(tmp_path):
    run_dir = tmp_path / "r"
    rlfunc.train(_config(total=16, checkpoint_every=16), run_dir=run_dir)
    meta_path = run_dir / "checkpoints" / "step_000000016" / "meta.json"
    meta = json.loads(meta_path.read_text())
    assert meta["pending_env_steps"] == 0

    def write(edited):
        edited = dict(edited)
        edited["checksum"] = meta_checksum(edited)  # an edit must re-sign meta.json, or the checkpoint is refused
        meta_path.write_text(json.dumps(edited))

    write({**meta, "pending_env_steps": 5})  # more rows than one vector step of 4 envs stores
    with pytest.raises(CheckpointError, match="pending_env_steps=5"):
        rlfunc.resume(run_dir, total_steps=24)
    old = {k: v for k, v in meta.items() if k not in ("pending_env_steps", "recent_returns", "checksum")}
    write(old)  # as an earlier rlfunc wrote it: nothing pending
    assert rlfunc.resume(run_dir, total_steps=24).env_steps == 24


def test_a_population_ended_inside_a_vector_step_counts_its_members_pending_rows(tmp_path, monkeypatch):
    """A population's periodic checkpoints follow whole rounds, but its end (``train.total_steps``) and a crash
    save fall inside one: each member's uncounted rows are recorded and counted first by the resume."""
    from rlfunc.runtime import population

    straight, short, crashed = tmp_path / "straight", tmp_path / "short", tmp_path / "crashed"
    config = _config(seeds=[0, 1], eval_every=22)
    rlfunc.train(config, run_dir=straight)
    rlfunc.train(_config(total=22, seeds=[0, 1], eval_every=22), run_dir=short)
    meta = load_checkpoint(short)[1]
    assert meta["env_steps"] == [22, 22] and meta["pending_env_steps"] == [2, 2]
    written = sorted(p.name for p in (short / "checkpoints").iterdir())
    assert rlfunc.resume(short).env_steps == 22  # a finished run: nothing counted, nothing written again
    assert sorted(p.name for p in (short / "checkpoints").iterdir()) == written
    assert load_checkpoint(short)[1]["pending_env_steps"] == [2, 2]
    rlfunc.resume(short, total_steps=72)

    real, calls = population.PopulationTrainer.evaluate_members, {"n": 0}

    def interrupted(self, ks):  # a Ctrl-C in the first evaluation, at step 22: mid-round
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt
        return real(self, ks)

    with monkeypatch.context() as m:
        m.setattr(population.PopulationTrainer, "evaluate_members", interrupted)
        with pytest.raises(KeyboardInterrupt):
            rlfunc.train(config, run_dir=crashed)
    meta = load_checkpoint(crashed)[1]
    assert meta["env_steps"] == [22, 22] and meta["pending_env_steps"] == [2, 2] and meta["evals"] == [[], []]
    rlfunc.resume(crashed)  # evaluates at 22 first (missed), then counts 23 and 24
    a, meta_a = load_checkpoint(straight / "checkpoints" / "step_000000072")
    for run_dir in (short, crashed):
        b, meta_b = load_checkpoint(run_dir / "checkpoints" / "step_000000072")
        _assert_same_tensors(a, b)
        assert meta_b["env_steps"] == [72, 72] and meta_b["updates"] == meta_a["updates"]
        assert meta_b["pending_env_steps"] == [0, 0] and meta_b["evals"] == meta_a["evals"]
        for k in (0, 1):  # each member's logs as the uninterrupted run's (episode returns from before the cut too)
            rows = _metrics(run_dir / f"member-{k}")
            if run_dir == short:  # plus the row the 22-step run wrote at its last step, before it was extended
                assert [r["step"] for r in rows].count("22") == 1
                rows = [r for r in rows if r["step"] != "22"]
            assert rows == _metrics(straight / f"member-{k}")
