"""A Ctrl-C or SIGTERM that lands inside an update waits for it (rlfunc.runtime.interrupts).

It raised at once: the env step was counted and its update's new state not assigned, so the run saved
on the way out one update short and the resumed run made one update fewer than an uninterrupted one
(found by the session-31 review of the resume changes). The first signal inside an env step's count
and its updates is now held until the next count; a second one raises at once.

The runs are those of ``tests/test_resume_mid_vector_step.py``: Pendulum with 6-step episodes on 4
envs, so the signal sent during step 22's update stops the run at step 22 with rows 23 and 24 stored,
and the next env step is the autoreset step of every copy: the resumed run must equal the
uninterrupted one bit for bit.
"""

import os
import signal

import pytest

import rlfunc
from rlfunc.runtime import population as population_module
from rlfunc.runtime import trainer as trainer_module
from rlfunc.runtime.checkpoint import load_checkpoint

from test_resume_mid_vector_step import Trace, _assert_same_tensors, _config, _metrics


def _signal_during(cls, name, at_step, signals, monkeypatch, step_of):
    """Send ``signals`` to this process from inside ``cls.name`` (the update), the first time ``step_of(self)``
    reaches ``at_step`` (a population runs a round's updates together, after the round's counts)."""
    original = getattr(cls, name)
    sent = []

    def wrapped(self, *args, **kwargs):
        if step_of(self) >= at_step and not sent:
            sent.append(step_of(self))
            for signum in signals:
                os.kill(os.getpid(), signum)  # Python runs the handler before the next bytecode: inside the update
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, wrapped)
    return sent


def test_sigterm_inside_an_update_stops_after_it_and_the_resumed_run_is_the_uninterrupted_one(tmp_path, monkeypatch):
    config = _config(checkpoint_every=100)
    straight, cut = tmp_path / "straight", tmp_path / "cut"
    whole = Trace()
    rlfunc.train(config, run_dir=straight, callbacks=[whole])
    sent = _signal_during(trainer_module.Trainer, "_learn", 22, [signal.SIGTERM], monkeypatch, lambda t: t.env_step)
    with pytest.raises(SystemExit) as stopped:
        rlfunc.train(config, run_dir=cut)
    assert sent == [22] and stopped.value.code == 143
    monkeypatch.undo()
    _, meta = load_checkpoint(cut)
    calls_at_22 = [c for s, c, _ in whole.rows if s == 22][0]
    assert meta["env_step"] == 22 and meta["updates"] == calls_at_22 and meta["pending_env_steps"] == 2
    resumed = Trace()
    result = rlfunc.resume(cut, callbacks=[resumed])
    assert resumed.rows == [r for r in whole.rows if r[0] > 22]
    assert result.gradient_steps == whole.rows[-1][1]
    a, _ = load_checkpoint(straight / "checkpoints" / "step_000000072")
    b, _ = load_checkpoint(cut / "checkpoints" / "step_000000072")
    _assert_same_tensors(a, b)
    assert _metrics(cut) == _metrics(straight)
    assert _metrics(cut, "eval.csv") == _metrics(straight, "eval.csv")


def test_a_second_signal_inside_the_update_stops_at_once(tmp_path, monkeypatch):
    """Two SIGTERMs before the update's body: the second raises at once (the update does not run), and the
    run still saves on the way out, as before."""
    config = _config(checkpoint_every=100)
    ran = []
    original = trainer_module.Trainer._learn

    def counting(self):
        ran.append(self.env_step)
        return original(self)

    monkeypatch.setattr(trainer_module.Trainer, "_learn", counting)
    _signal_during(trainer_module.Trainer, "_learn", 22, [signal.SIGTERM, signal.SIGTERM], monkeypatch,
                   lambda t: t.env_step)
    with pytest.raises(SystemExit):
        rlfunc.train(config, run_dir=tmp_path / "run")
    assert 22 not in ran and ran[-1] == 21
    _, meta = load_checkpoint(tmp_path / "run")
    assert meta["env_step"] == 22


def test_sigterm_inside_a_population_update_stops_after_it_and_the_resume_makes_every_update(tmp_path, monkeypatch):
    config = _config(checkpoint_every=100, seeds=[0, 1])
    straight, cut = tmp_path / "straight", tmp_path / "cut"
    rlfunc.train(config, run_dir=straight)
    sent = _signal_during(population_module.PopulationTrainer, "learn", 22, [signal.SIGTERM], monkeypatch,
                          lambda t: max(t.env_steps))
    with pytest.raises(SystemExit):
        rlfunc.train(config, run_dir=cut)
    assert sent and sent[0] >= 22
    _, meta = load_checkpoint(cut)
    assert meta["env_step"] < 72
    monkeypatch.undo()
    rlfunc.resume(cut)
    a, meta_a = load_checkpoint(straight / "checkpoints" / "step_000000072")
    b, meta_b = load_checkpoint(cut / "checkpoints" / "step_000000072")
    assert meta_a["updates"] == meta_b["updates"]
    _assert_same_tensors(a, b)
    for k in (0, 1):
        assert _metrics(cut / f"member-{k}") == _metrics(straight / f"member-{k}")


@pytest.mark.skipif(signal.getsignal(signal.SIGINT) is not signal.default_int_handler,
                    reason="SIGINT is not Python's default handler in this process (the guard leaves it alone)")
def test_ctrl_c_inside_an_update_is_held_too_and_says_how_to_resume(tmp_path, monkeypatch, capsys):
    config = _config(checkpoint_every=100)
    _signal_during(trainer_module.Trainer, "_learn", 22, [signal.SIGINT], monkeypatch, lambda t: t.env_step)
    with pytest.raises(KeyboardInterrupt, match="rlfunc resume"):
        rlfunc.train(config, run_dir=tmp_path / "run")
    assert "Ctrl-C: stopping after this env step's updates" in capsys.readouterr().err
    _, meta = load_checkpoint(tmp_path / "run")
    assert meta["env_step"] == 22 and meta["pending_env_steps"] == 2
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
