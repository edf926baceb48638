"""``rlfunc sweep --address`` joins a running Ray cluster, by its GCS address and by ``ray://``.

The cluster is a one-node head started here with ``ray start --head --block`` on
loopback (node IP 127.0.0.1, dashboard off, usage stats off, ports chosen free; the
Ray client proxy also listens on the machine's own address, and nothing is sent
off the machine), in its own process group, and killed with that group after the
tests: never ``ray stop``, which would also stop every other Ray on the machine.
Skipped when Ray is not installed."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytest.importorskip("ray")

TINY = {
    "algo": "sac",
    "env": {"id": "Pendulum-v1"},
    "train": {
        "total_steps": 200,
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", OMP_NUM_THREADS="1")
    env.pop("RAY_ADDRESS", None)
    return env


def _wait_listening(port: int, head: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if head.poll() is not None:
            raise RuntimeError(f"ray start --head exited with {head.returncode}: {head.stdout.read()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"the Ray head did not listen on 127.0.0.1:{port} within {timeout_s} s")


@pytest.fixture(scope="module")
def ray_head():
    """A Ray head on loopback for this module's tests: ``(gcs_port, client_port)``."""
    gcs, client = _free_port(), _free_port()
    workers = 30_000 + os.getpid() % 9_000  # a block of worker ports clear of Ray's fixed defaults (8265, 52365)
    cmd = [
        sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
        "--node-ip-address=127.0.0.1", f"--port={gcs}", f"--ray-client-server-port={client}",
        "--include-dashboard=false", "--num-cpus=2", "--disable-usage-stats",
        f"--min-worker-port={workers}", f"--max-worker-port={workers + 50}",
    ]
    head = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        _wait_listening(gcs, head, 90)
        _wait_listening(client, head, 60)
        yield gcs, client
    finally:
        # `ray start --block` does not exit on SIGTERM within 20 s here (measured: the suite waited the
        # full 20 s), so a short grace period, then SIGKILL to the whole process group.
        for sig, wait_s in ((signal.SIGTERM, 3), (signal.SIGKILL, 10)):
            try:
                os.killpg(head.pid, sig)
            except ProcessLookupError:
                break
            try:
                head.wait(timeout=wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
        try:  # the head's children share its process group; none may outlive the test
            os.killpg(head.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _sweep(config: Path, address: str, sweep_dir: Path) -> dict:
    cmd = [sys.executable, "-m", "rlfunc.runtime.cli", "sweep", str(config), "--seeds", "0",
           "--address", address, "--sweep-dir", str(sweep_dir)]
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads((sweep_dir / "results.json").read_text())


@pytest.mark.parametrize("scheme", ["gcs", "client"])
def test_sweep_joins_a_running_cluster(ray_head, tmp_path, scheme):
    gcs, client = ray_head
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY))
    address = f"127.0.0.1:{gcs}" if scheme == "gcs" else f"ray://127.0.0.1:{client}"
    # Ray's client proxy starts a server per client connection, and on this VM that start sometimes
    # times out ("Initialization failure from server"; seen in 2 of 6 runs, never with the GCS
    # address): rlfunc then reports it in one sentence and exits 2. A new connection is a new start.
    for attempt in range(3):
        try:
            result = _sweep(config, address, tmp_path / f"sweep{attempt}")
            break
        except AssertionError as exc:
            if scheme != "client" or "Initialization failure from server" not in str(exc) or attempt == 2:
                raise
    sweep_dir = tmp_path / f"sweep{attempt}"
    runs = result["runs"]
    assert len(runs) == 1 and runs[0]["env_steps"] == 200
    assert result["machine"]["embedded"] is False and result["machine"]["address"] == address
    # the run directory is an ordinary one, written where the task ran (here: this machine)
    assert (sweep_dir / Path(runs[0]["run_dir"]).name / "eval.csv").exists()
