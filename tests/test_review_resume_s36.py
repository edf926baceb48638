"""Session 36: `rlfunc resume --total-steps` of a run a stopping rule already stopped trains nothing, and left
config.yaml holding the new total, which the next plain resume then named as an edit it does not read."""

from __future__ import annotations

import yaml
from test_review_run_surface import TINY, checkpoints

import rlfunc


def test_total_steps_on_a_rule_stopped_run_leaves_config_yaml_with_the_checkpoints_total(tmp_path, capsys):
    over = {**TINY, "train.max_updates": 101}
    run = tmp_path / "run"
    first = rlfunc.train(None, overrides=over, run_dir=run)
    total = yaml.safe_load((run / "config.yaml").read_text())["train"]["total_steps"]
    saved = checkpoints(run)
    capsys.readouterr()
    again = rlfunc.resume(run, total_steps=total + 400)
    assert (again.env_steps, again.stop_reason) == (first.env_steps, first.stop_reason)
    err = capsys.readouterr().err
    assert (f"nothing to train (--total-steps {total + 400} does not lift a stopping rule; the run keeps "
            f"train.total_steps {total})." in err)
    assert yaml.safe_load((run / "config.yaml").read_text())["train"]["total_steps"] == total
    assert checkpoints(run) == saved
    rlfunc.resume(run)  # a plain resume: nothing in config.yaml reads as an edit
    assert "is not read by a resume" not in capsys.readouterr().err
