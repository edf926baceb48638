"""Session 36 review of `rlfunc plot` from a population user's side: two runs with one setting and one seed
(the same run trained twice, or a population's member beside the single run it reproduces) were averaged
as two seeds without a word."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlfunc.runtime.cli import main


def _run(d: Path, seed: int) -> Path:
    d.mkdir()
    (d / "config.yaml").write_text(f"algo: sac\nenv: {{id: Pendulum-v1}}\ntrain: {{seed: {seed}}}\n")
    (d / "eval.csv").write_text("step,time_s,mean_return,std_return,episodes\n100,0.0,1.0,0.0,1\n200,0.0,2.0,0.0,1\n")
    return d


@pytest.mark.parametrize(("seeds", "warned"), [((3, 3), True), ((3, 4), False)])
def test_two_runs_of_one_setting_and_seed_are_named_on_stderr(tmp_path, capsys, seeds, warned):
    pytest.importorskip("matplotlib")
    a, b = _run(tmp_path / "a", seeds[0]), _run(tmp_path / "b", seeds[1])
    assert main(["plot", str(a), str(b), "--out", str(tmp_path / "p.png")]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    if warned:
        assert err == [f"rlfunc: warning: the runs {str(a)!r} and {str(b)!r} have the same setting and seed (3), so "
                       "their curve averages one seed twice; leave one out to plot distinct seeds."]
    else:
        assert err == []
    assert (tmp_path / "p.png").exists()
