#!/usr/bin/env bash
# Every GPU check of the project in one pass, sized to a short lease on a CUDA machine:
#   1. the card, torch, and one headless DMC frame (EGL must not return a black image);
#   2. `update --algo ALL --device cuda` (imperative vs functional eager vs +cudagraph);
#   3. `peers --device cuda` update tasks (rlfunc vs Stable-Baselines3 / TorchRL on the same card);
#   4. DrQ-v2 on DMC cartpole_balance with the official settings, 3 seeds, 100k frames, on CUDA
#      with the update replayed as a CUDA graph, while tests/test_gpu_path.py runs beside it;
#   5. if time is left: the peers training-loop and replay tasks, then REDQ's compiled (+cudagraph) update.
# Usage: benchmarks/gpu_checks.sh OUT_DIR [SECONDS]   (SECONDS: the whole budget, default 540)
#   STAGES="card update peers drqv2 extra" (default: all) picks stages, e.g. STAGES="card drqv2" to give
#   a whole lease to DrQ-v2; DRQV2_SEEDS (default 3) and DRQV2_FIRST_SEED (default 0) split its seeds
#   over leases (one process per seed; they share the card). On an H100, 3 processes ran ~51 agent
#   steps/s each (a 100k-frame run is 50k agent steps).
# Every stage has its own time limit, taken from what is left, so OUT_DIR always ends complete
# with what finished: JSON/PNG per benchmark, logs, and the DrQ-v2 run directories (eval.csv).
# A DrQ-v2 learn cut off by the budget leaves no JSON: `run.py learn-collect OUT_DIR/runs/*/*`
# builds it from the run directories (each run's evaluations so far).
set -u
OUT=${1:?usage: benchmarks/gpu_checks.sh OUT_DIR [SECONDS]}
BUDGET=${2:-540}
mkdir -p "$OUT"
T0=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - T0))); }
stage() { echo "== [$(($(date +%s) - T0)) s] $*"; }
export PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=PASSIVE
PY=${PYTHON:-python3}
STAGES=${STAGES:-card update peers drqv2 extra}
SEEDS=${DRQV2_SEEDS:-3}
FIRST_SEED=${DRQV2_FIRST_SEED:-0}
want() { case " $STAGES " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

if want card; then
stage "card and versions"
nvidia-smi -L
$PY -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0), 'python', sys.version.split()[0])"
timeout 60 $PY - <<'EOF'
from rlfunc.envs.dmc import load_suite
import os
suite = load_suite()
env = suite.load("cartpole", "balance", task_kwargs={"random": 0})
env.reset()
img = env.physics.render(84, 84, camera_id=0)
print(f"DMC render via MUJOCO_GL={os.environ.get('MUJOCO_GL')}: mean {img.mean():.1f}, std {img.std():.1f} (a black frame has 0)")
EOF
fi

if want update; then
stage "update --algo ALL --device cuda (no compile)"
timeout 150 $PY benchmarks/run.py update --algo ALL --device cuda --threads 1 --no-compile \
    --repeats 3 --window-s 0.3 --out "$OUT/update" --note "gpu_checks.sh: 3 windows of 0.3 s" 2>&1 | tee "$OUT/update.log" | tail -60
fi

if want peers; then
stage "peers --device cuda, update tasks (no compile)"
timeout 100 $PY benchmarks/run.py peers --device cuda --threads 1 --no-compile --repeats 3 --window-s 0.3 --traceback \
    --only redq_critic_update sac_critic_update sequence_update --out "$OUT/peers_cuda.json" \
    --note "gpu_checks.sh: 3 windows of 0.3 s" 2>&1 | tee "$OUT/peers.log" | tail -40
fi

if want drqv2; then
stage "DrQ-v2 faithful: $SEEDS seed(s) from $FIRST_SEED x 100k frames on cuda (+ tests/test_gpu_path.py beside it)"
LEARN_S=$(($(left) - 45))
timeout 240 $PY -m pytest -q -rs -p no:cacheprovider tests/test_gpu_path.py > "$OUT/pytest_gpu.log" 2>&1 &
TESTS=$!
timeout $LEARN_S $PY benchmarks/run.py learn --config configs/drqv2/cartpole_balance.yaml --seeds "$SEEDS" \
    --first-seed "$FIRST_SEED" --jobs "$SEEDS" \
    --threads 1 --set train.device=cuda --set train.cuda_graph=true --set train.replay_size=100000 \
    --set train.eval_every=10000 --set train.checkpoint_every=50000 --runs-dir "$OUT/runs" --out "$OUT/learn_drqv2_gpu.json" \
    --note "official settings on CUDA; replay_size 100000 frames holds every frame of a 100k-frame run, as 1M would; evaluated every 20k frames (official: 10k) and checkpointed at the end only: neither changes training" \
    > "$OUT/learn_drqv2.log" 2>&1
echo "learn exit $? (124 = cut off at ${LEARN_S} s)"
tail -8 "$OUT/learn_drqv2.log"
wait $TESTS
tail -15 "$OUT/pytest_gpu.log"
for f in "$OUT"/runs/*/*/eval.csv; do echo "$f"; tail -3 "$f"; done
fi

if want extra && [ "$(left)" -gt 90 ]; then
    stage "peers --device cuda, training loop and replay tasks (no compile)"
    timeout $(($(left) - 15)) $PY benchmarks/run.py peers --device cuda --threads 1 --no-compile --repeats 3 \
        --window-s 0.3 --segment-steps 20 --loop-repeats 2 --loop-warmup 2 --traceback \
        --only pendulum_train_loop_utd20 replay_sample replay_sample_sequence --out "$OUT/peers_cuda_loop.json" \
        --note "gpu_checks.sh: 3 windows of 0.3 s; loop segments of 20 env steps" 2>&1 | tee "$OUT/peers_loop.log" | tail -30
fi
if want extra && [ "$(left)" -gt 90 ]; then
    stage "update --algo redq --device cuda (compiled + cudagraph)"
    timeout $(($(left) - 15)) $PY benchmarks/run.py update --algo redq --device cuda --threads 1 --repeats 3 \
        --window-s 0.3 --out "$OUT/update_redq_compiled.json" --note "gpu_checks.sh: compiled variants" 2>&1 \
        | tee "$OUT/update_redq_compiled.log" | tail -20
fi
stage "done"
