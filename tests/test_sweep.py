"""``rlfunc sweep`` on an embedded Ray (loopback only, dashboard off, shut down after each test):
a 2 x 2 sweep, a stopped sweep continued with --resume, a killed worker retried from its
checkpoint, two distributed runs taking turns on 2 CPUs (placement groups), and the one-sentence
errors: bad specs, runs asking for more than the cluster has, addresses where nothing or something
other than Ray listens, ``--address auto`` with a stale address file, and a bounded join. Skipped when
Ray is not installed."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

ray = pytest.importorskip("ray")

from rlfunc.runtime.cli import main  # noqa: E402
from rlfunc.scale.sweep import ATTEMPTS_FILE, sweep  # noqa: E402

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

TINY = {
    "algo": "sac",
    "env": {"id": "Pendulum-v1"},
    "train": {
        "total_steps": 400,
        "learning_starts": 100,
        "eval_every": 200,
        "eval_episodes": 1,
        "checkpoint_every": 200,
        "log_every": 100,
        "threads": 1,
        "tensorboard": False,
    },
    "agent": {"hidden_sizes": [16, 16], "batch_size": 32},
}


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return path


@pytest.fixture(autouse=True)
def bounded():
    """Each test ends within 150 s (SIGALRM), and leaves no Ray running in this process."""
    def expire(signum, frame):
        raise TimeoutError("test_sweep: a test ran past 150 s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(150)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        if ray.is_initialized():
            ray.shutdown()


def attempts(sweep_dir: Path) -> list[dict]:
    path = sweep_dir / ATTEMPTS_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def test_a_2_seed_by_2_setting_sweep_writes_4_plain_runs_and_the_learn_json(tiny, tmp_path):
    out = tmp_path / "out" / "learn.json"
    result = sweep(tiny, "0-1", ["agent.critic_lr=1e-3,3e-4"], ["train.total_steps=300"],
                   sweep_dir=tmp_path / "sw", out=out, echo=lambda line: None)
    assert not ray.is_initialized(), "the embedded Ray is shut down after the sweep"
    saved = json.loads(out.read_text())
    assert set(saved) >= {"machine", "runs", "summary", "settings"} and saved["failed"] == {}
    assert saved["machine"]["embedded"] and saved["machine"]["cluster_cpus"] >= 1
    runs = saved["runs"]
    assert len(runs) == 4
    assert sorted((r["grid"]["agent.critic_lr"], r["seed"]) for r in runs) == [(3e-4, 0), (3e-4, 1), (1e-3, 0), (1e-3, 1)]
    for r in runs:
        assert r["complete"] and r["env_steps"] == 300 and r["final_return"] is not None
        assert r["agent"]["critic_lr"] == r["grid"]["agent.critic_lr"] and r["overrides"]["train.seed"] == r["seed"]
        run_dir = Path(r["run_dir"])
        assert run_dir.parent == tmp_path / "sw"
        assert (run_dir / "checkpoints" / "latest").is_file() and (run_dir / "config.yaml").is_file()
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
        assert cfg["train"]["seed"] == r["seed"] and cfg["agent"]["critic_lr"] == r["grid"]["agent.critic_lr"]
    assert set(saved["summary"]) == {"sac agent.critic_lr=0.001", "sac agent.critic_lr=0.0003"}
    assert all(s["seeds"] == 2 for s in saved["summary"].values())
    png = out.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and result["png"] == str(png)
    from rlfunc.runtime.plot import group_runs

    assert len(group_runs([r["run_dir"] for r in runs])) == 2, "one curve per grid point"
    import rlfunc

    assert len(rlfunc.evaluate(runs[0]["run_dir"], episodes=1)["returns"]) == 1, "a plain run `rlfunc eval` reads"
    plan = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    assert [e["name"] for e in plan["runs"]] == [r["name"] for r in runs]
    assert sorted(a["start"] for a in attempts(tmp_path / "sw")) == ["fresh"] * 4


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from rlfunc.runtime.cli import main; sys.exit(main(sys.argv[1:]))", *args]


def test_a_stopped_sweep_resumes_without_retraining_finished_runs(tiny, tmp_path, capsys):
    sw = tmp_path / "sw"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        _cli("sweep", str(tiny), "--seeds", "0-1", "--set", "train.total_steps=1000", "--max-concurrent", "1",
             "--sweep-dir", str(sw)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    first, second = sw / "g0-s0", sw / "g0-s1"
    try:
        deadline = time.monotonic() + 90
        while not (second / "checkpoints" / "latest").is_file():  # run 1 is done, run 2 has a checkpoint
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the sweep did not reach its second run's first checkpoint"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)  # stop the driver (a batch scheduler's kill)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert f"rlfunc sweep --resume {sw}" in stderr and "g0-s0: final" in stdout
    from rlfunc.runtime.checkpoint import load_checkpoint

    stopped_at = load_checkpoint(second)[1]["env_step"]
    assert 200 <= stopped_at < 1000, "the second run was stopped before its end"
    kept = {p: p.stat().st_mtime_ns for p in (first / "eval.csv", first / "metrics.csv", first / "checkpoints" / "latest")}
    before = attempts(sw)
    assert [a["run"] for a in before] == ["g0-s0", "g0-s1"]

    assert main(["sweep", "--resume", str(sw)]) == 0
    out = capsys.readouterr().out
    assert "1 finished already, 1 to train" in out
    assert {p: p.stat().st_mtime_ns for p in kept} == kept, "the finished run was not trained again"
    after = attempts(sw)[len(before):]
    assert [a["run"] for a in after] == ["g0-s1"] and after[0]["start"] == "resume" and after[0]["from_step"] >= 200
    assert after[0]["from_step"] == stopped_at, "resumed from the newest checkpoint"
    result = json.loads((sw / "results.json").read_text())
    assert [(r["name"], r["env_steps"], r["complete"]) for r in result["runs"]] == [("g0-s0", 1000, True), ("g0-s1", 1000, True)]
    assert not ray.is_initialized()
    assert main(["sweep", "--resume", str(sw), "--out", str(tmp_path / "again.json")]) == 0  # all done: no Ray
    assert "2 finished already, 0 to train" in capsys.readouterr().out and len(attempts(sw)) == len(before) + 1


def test_a_killed_worker_is_retried_and_continues_from_its_checkpoint(tiny, tmp_path):
    sw = tmp_path / "sw"
    killed: dict = {}

    def kill_the_worker() -> None:
        run_dir = sw / "g0-s0"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            tries = attempts(sw)
            latest = run_dir / "checkpoints" / "latest"
            if tries and latest.is_file():
                killed["step"] = int(latest.read_text().strip().removeprefix("step_"))
                killed["pid"] = tries[0]["pid"]
                os.kill(killed["pid"], signal.SIGKILL)  # the worker process dies mid-run
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=kill_the_worker, daemon=True)
    watcher.start()
    result = sweep(tiny, "0", None, ["train.total_steps=2000"], sweep_dir=sw, max_retries=2, echo=lambda line: None)
    watcher.join(timeout=5)
    assert killed, "the watcher never saw the run's first checkpoint"
    assert killed["step"] < 2000
    tries = attempts(sw)
    assert [t["start"] for t in tries] == ["fresh", "resume"], tries
    assert tries[0]["pid"] == killed["pid"] and tries[1]["pid"] != killed["pid"]
    assert tries[1]["from_step"] >= killed["step"]
    assert result["failed"] == {}
    (run,) = result["runs"]
    assert run["complete"] and run["env_steps"] == 2000
    steps = [int(line.split(",")[0]) for line in (sw / "g0-s0" / "eval.csv").read_text().splitlines()[1:]]
    assert steps == sorted(set(steps)) and steps[-1] == 2000, "one continuous curve, no restart from step 0"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "args, sentence",
    [
        (["--seeds", "0-x"], "--seeds '0-x' is not a seed list"),
        (["--seeds", "3-1"], "runs backwards"),
        (["--grid", "critic_lr=1e-3"], "--grid 'critic_lr=1e-3' must look like section.key=value1,value2"),
        (["--grid", "agent.critic_lr=1e-3,,3e-4"], "has an empty value"),
        (["--grid", "agent.critic_lr=1e-3", "--set", "agent.critic_lr=1"], "in both --set and --grid"),
        (["--set", "agent.nope=1"], "Unknown config key 'agent.nope'"),
        (["--address", "127.0.0.1:PORT"], "Cannot reach a Ray cluster at '127.0.0.1:PORT'"),
        (["--address", "ray://127.0.0.1:PORT"], "Cannot reach a Ray cluster at 'ray://127.0.0.1:PORT'"),
    ],
)
def test_bad_input_is_one_sentence_before_anything_runs(tiny, tmp_path, capsys, args, sentence):
    port = str(_closed_port())
    args = [a.replace("PORT", port) for a in args]
    assert main(["sweep", str(tiny), "--sweep-dir", str(tmp_path / "sw"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("rlfunc: error: ") and sentence.replace("PORT", port) in err
    assert not (tmp_path / "sw").exists() and not ray.is_initialized()


def test_ray_missing_is_one_sentence_naming_the_extra(tiny, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    assert main(["sweep", str(tiny), "--sweep-dir", str(tmp_path / "sw")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == 'rlfunc: error: rlfunc sweep needs Ray, which is not installed; install it with pip install -e ".[ray]".'
    assert not (tmp_path / "sw").exists()


def test_resume_of_a_directory_without_a_sweep_and_resume_with_a_new_plan_are_refused(tiny, tmp_path, capsys):
    assert main(["sweep", "--resume", str(tmp_path)]) == 2
    assert "holds no sweep.json" in capsys.readouterr().err
    assert main(["sweep", str(tiny), "--resume", str(tmp_path)]) == 2
    assert "--resume continues the stored plan" in capsys.readouterr().err


def test_the_library_and_the_cli_parser_do_not_import_ray():
    code = ("import sys, rlfunc, rlfunc.runtime.cli as c, rlfunc.scale; c.build_parser(); "
            "import rlfunc.algos, rlfunc.replay, rlfunc.envs, rlfunc.core; "
            "sys.exit(1 if 'ray' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


# ----------------------------------------------------------------------------- what Ray cannot place, or reach

CPUS = os.cpu_count() or 1  # the embedded Ray's CPUs

DISTRIBUTED = {
    "algo": "r2d2",
    "env": {"id": "CartPole-v1", "wrappers": ["mask_velocity"]},
    "distributed": {"actors": 1, "envs_per_actor": 2, "param_sync_steps": 50, "param_sync_updates": 2,
                    "max_replay_ratio": 0.5},
    "train": {"total_steps": 200, "learning_starts": 8, "replay_size": 300, "eval_every": 200, "eval_episodes": 1,
              "checkpoint_every": 200, "log_every": 100, "threads": 1, "tensorboard": False, "compile": False},
    "agent": {"encoder_sizes": [16], "lstm_size": 16, "head_sizes": [16], "burn_in": 2, "sequence_length": 4,
              "sequence_period": 2, "batch_size": 8, "target_period": 50},
}


def _gpu_visible() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.parametrize("case", ["threads", "gpus", "distributed"])
def test_a_run_asking_for_more_than_the_cluster_has_is_one_sentence_before_anything_is_written(tmp_path, capsys, case):
    """Ray would keep such a task pending forever (the sweep used to wait with it): the sweep compares each
    run's request (a distributed config's with its actors) with the cluster's resources first."""
    config = tmp_path / "c.yaml"
    if case == "threads":
        config.write_text(yaml.safe_dump(TINY))
        args = ["--set", f"train.threads={CPUS + 1}"]
        sentence = (f"Run g0-s0 asks Ray for {CPUS + 1} CPUs (train.threads={CPUS + 1}) but the Ray cluster has "
                    f"{CPUS}; lower train.threads, or join a cluster with more (--address).")
    elif case == "gpus":
        if _gpu_visible():
            pytest.skip("this machine has a GPU")
        config.write_text(yaml.safe_dump(TINY))
        args = ["--gpus", "0.5"]
        sentence = ("Run g0-s0 asks Ray for 0.5 GPUs (--gpus 0.5) but the Ray cluster has no GPU; drop --gpus, "
                    "or join a cluster with GPUs (--address).")
    else:
        config.write_text(yaml.safe_dump({**DISTRIBUTED, "distributed": {**DISTRIBUTED["distributed"], "actors": CPUS}}))
        args = []
        sentence = (f"Run g0-s0 asks Ray for {CPUS + 1} CPUs (train.threads=1 for its learner plus distributed.actors="
                    f"{CPUS} x distributed.actor_cpus=1) but the Ray cluster has {CPUS}; lower train.threads, "
                    "distributed.actors or distributed.actor_cpus, or join a cluster with more (--address).")
    t0 = time.monotonic()
    assert main(["sweep", str(config), "--seeds", "0", "--sweep-dir", str(tmp_path / "sw"), *args]) == 2
    assert time.monotonic() - t0 < 60
    err = capsys.readouterr().err.strip()
    assert err == f"rlfunc: error: {sentence}"
    assert not (tmp_path / "sw").exists() and not ray.is_initialized()


def test_a_distributed_sweep_reserves_each_runs_actors_with_it(tmp_path):
    """Two distributed runs, each a learner task (1 CPU) and an actor (1 CPU), on a 2-CPU Ray: each run's
    task and actor are one placement group, so the runs take turns. (As plain tasks both learners took the
    two CPUs and neither actor could ever start.)"""
    config = tmp_path / "d.yaml"
    config.write_text(yaml.safe_dump(DISTRIBUTED))
    ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False, num_cpus=2,
             log_to_driver=False, configure_logging=False)
    result = sweep(config, "0-1", None, None, sweep_dir=tmp_path / "sw", echo=lambda line: None)
    assert result["failed"] == {}
    assert [(r["name"], r["complete"]) for r in result["runs"]] == [("g0-s0", True), ("g0-s1", True)]
    assert all(200 <= r["env_steps"] < 202 for r in result["runs"])
    assert ray.util.placement_group_table() == {} or all(
        g["state"] == "REMOVED" for g in ray.util.placement_group_table().values())


class _Listener:
    """A TCP server on 127.0.0.1 that is not Ray: it accepts and keeps connections silently, or greets
    each with a line as an SSH server does."""

    def __init__(self, greeting: bytes = b""):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns: list = []
        self.greeting = greeting
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.greeting:
                conn.sendall(self.greeting)
            self.conns.append(conn)

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.mark.parametrize("scheme, greeting, why", [
    ("ray://", b"", "something there accepts connections but gave no gRPC answer within 3 s"),
    ("ray://", b"SSH-2.0-OpenSSH_9.6\r\n", "something there answers, but not as a gRPC server"),
    ("", b"", None),  # Ray dials the node's own address for 127.0.0.1: refused there, or no gRPC answer
])
def test_an_address_where_something_else_listens_is_one_sentence_within_seconds(tiny, tmp_path, capsys, monkeypatch,
                                                                                scheme, greeting, why):
    """Ray retried such an address for 37-100 s (and ignored SIGTERM meanwhile); one TCP connect and one
    gRPC greeting tell at once, before ``ray.init`` is called."""
    joined = []

    def init(*args, **kwargs):
        joined.append(kwargs.get("address", args[:1]))
        raise RuntimeError("ray.init was called: the address was not refused before Ray's join")

    monkeypatch.setattr(ray, "init", init)
    listener = _Listener(greeting)
    try:
        address = f"{scheme}127.0.0.1:{listener.port}"
        t0 = time.monotonic()
        assert main(["sweep", str(tiny), "--sweep-dir", str(tmp_path / "sw"), "--address", address]) == 2
        assert time.monotonic() - t0 < 30  # a bound against a hang: the greeting waits 3 s at most
    finally:
        listener.close()
    assert joined == [], "Ray's join was tried"
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"rlfunc: error: Cannot reach a Ray cluster at {address!r} (")
    assert err.endswith("); start one with `ray start --head` or check --address.")
    if why is not None:
        assert f"({why})" in err
    assert not (tmp_path / "sw").exists() and not ray.is_initialized()


@pytest.mark.parametrize("stale", [True, False])
def test_address_auto_names_the_stale_address_file_or_says_there_is_no_cluster(tiny, tmp_path, capsys, monkeypatch,
                                                                                stale):
    """``--address auto`` joins the address the last ``ray start`` wrote; a file its stopped cluster left
    made Ray retry for 100 s."""
    from ray._private import services

    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    def no_running_ray():  # other Rays on this machine are not ours to join
        return frozenset()

    no_running_ray.cache_clear = lambda: None  # as the function it replaces (ray.shutdown calls it)
    monkeypatch.setattr(services, "find_gcs_addresses", no_running_ray)
    file = tmp_path / "tmp" / "ray" / "ray_current_cluster"
    if stale:
        file.parent.mkdir(parents=True)
        file.write_text(f"127.0.0.1:{_closed_port()}")
    t0 = time.monotonic()
    assert main(["sweep", str(tiny), "--sweep-dir", str(tmp_path / "sw"), "--address", "auto"]) == 2
    assert time.monotonic() - t0 < 10
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("rlfunc: error: --address auto ")
    if stale:
        assert f"(from {file}), where no Ray cluster answers (" in err
        assert err.endswith(f"; {file} is stale (its cluster stopped): start one with `ray start --head` or delete {file}.")
    else:
        assert err == (f"rlfunc: error: --address auto finds no Ray cluster on this machine (no RAY_ADDRESS, no {file}, "
                       "no running Ray); start one with `ray start --head` or pass --address host:port.")
    assert not (tmp_path / "sw").exists() and not ray.is_initialized()


def test_joining_an_address_where_no_ray_answers_is_bounded(tmp_path):
    """Past the reachability check (here skipped), ray.init itself gives up within ~15 s: rlfunc sets Ray's
    connection timeouts (read when Ray is imported: a fresh process) and its attempts. Ray's defaults
    retried for about 100 s."""
    code = ("import importlib, sys, time\n"
            "s = importlib.import_module('rlfunc.scale.sweep')\n"
            "s._check_reachable = lambda *a, **k: None\n"
            "t = time.monotonic()\n"
            "try:\n"
            "    s.connect(sys.argv[1])\n"
            "except s.ConfigError as exc:\n"
            "    print(f'{time.monotonic() - t:.1f}'); print(exc); sys.exit(3)\n")
    address = f"127.0.0.1:{_closed_port()}"
    proc = subprocess.run([sys.executable, "-c", code, address], capture_output=True, text=True, timeout=90,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 3, proc.stderr[-2000:]
    took, sentence = proc.stdout.strip().splitlines()
    assert float(took) < 25, proc.stderr[-2000:]
    assert sentence.startswith(f"Cannot join a Ray cluster at {address!r} (") and sentence.endswith(
        "start one with `ray start --head`, check --address, and give this machine the cluster's token (RAY_AUTH_TOKEN).")
