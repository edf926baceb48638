#!/usr/bin/env bash
# Every GPU check of the project in one pass, sized to a short lease on a CUDA machine:
#   1. the card, torch, and one headless DMC frame (EGL must not return a black image);
#   2. `update --algo ALL --device cuda` (imperative vs functional eager vs +cudagraph);
#   3. `peers --device cuda` update tasks (rlfunc vs Stable-Baselines3 / TorchRL on the same card);
#   4. tests/test_gpu_path.py;
#   5. DrQ-v2 on DMC cartpole_balance with the official settings, 3 seeds x 100k frames, on CUDA
#      with the update replayed as a CUDA graph, one process per seed sharing the card;
#   6. if time is left: the peers training-loop and replay tasks, then REDQ's compiled (+cudagraph) update.
# Usage: benchmarks/gpu_checks.sh OUT_DIR [SECONDS]   (SECONDS: the whole budget, default 540)
#   STAGES="card update peers tests drqv2 extra" (default: all) picks stages, e.g. STAGES="card drqv2" to
#   give a whole lease to DrQ-v2; DRQV2_SEEDS (default 3) and DRQV2_FIRST_SEED (default 0) split its
#   seeds over leases; DRQV2_EVAL_EVERY (agent steps, default 25000 = every 50k frames) spaces the
#   evaluations (10 episodes = 5000 agent steps each). A watchdog stops the highest running seed when
#   the slowest one would miss the budget, so the others reach 100k frames.
#   Processes sharing an H100 scaled poorly (1 / 2 / 3 runs: ~120 / 2x74 / 3x51 agent steps/s), and
#   one 100k-frame run alone takes ~6-7 min: within 10-minute calls, give each seed its own call
#   (STAGES="card drqv2" DRQV2_SEEDS=1 DRQV2_FIRST_SEED=k).
# Every stage has its own time limit, taken from what is left, so OUT_DIR always ends complete
# with what finished: JSON/PNG per benchmark, logs, and the DrQ-v2 run directories (eval.csv).
# A DrQ-v2 learn cut off by the budget leaves no JSON: `run.py learn-collect OUT_DIR/runs/s*/*/*`
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
STAGES=${STAGES:-card update peers tests drqv2 extra}
SEEDS=${DRQV2_SEEDS:-3}
FIRST_SEED=${DRQV2_FIRST_SEED:-0}
EVAL_EVERY=${DRQV2_EVAL_EVERY:-25000}
DRQV2_CONFIG=configs/drqv2/cartpole_balance.yaml
TOTAL=$(sed -n 's/^ *total_steps: *\([0-9]*\).*/\1/p' $DRQV2_CONFIG)  # agent steps (50000 = 100k frames)
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

if want tests; then
stage "tests/test_gpu_path.py"
timeout $(( $(left) < 240 ? $(left) : 240 )) $PY -m pytest -q -rs -p no:cacheprovider tests/test_gpu_path.py \
    > "$OUT/pytest_gpu.log" 2>&1
tail -15 "$OUT/pytest_gpu.log"
fi

if want drqv2; then
stage "DrQ-v2 faithful: $SEEDS seed(s) from $FIRST_SEED x 100k frames on cuda, one process each"
LEARN_S=$(($(left) - 40))
mkdir -p "$OUT/runs"
declare -A PIDS
for ((k = FIRST_SEED; k < FIRST_SEED + SEEDS; k++)); do
    setsid timeout $LEARN_S $PY benchmarks/run.py learn --config $DRQV2_CONFIG --seeds 1 \
        --first-seed $k --threads 1 --set train.device=cuda --set train.cuda_graph=true \
        --set train.replay_size=100000 --set train.eval_every=$EVAL_EVERY --set train.checkpoint_every=$TOTAL \
        --runs-dir "$OUT/runs/s$k" --out "$OUT/learn_drqv2_gpu_s$k.json" \
        --note "official settings on CUDA; replay_size 100000 frames holds every frame of a 100k-frame run, as 1M would; evaluated every $((2 * EVAL_EVERY)) frames (official: 10k) and checkpointed at the end only: neither changes training" \
        > "$OUT/learn_drqv2_s$k.log" 2>&1 &
    PIDS[$k]=$!
done
# Watchdog: seeds share the card; when the slowest running seed's projected finish (its last
# steps/s from metrics.csv, plus the evaluations still due) passes the deadline, stop the
# highest seed so the others finish (what it trained stays in its run directory).
DEADLINE=$(( $(date +%s) + LEARN_S - 15 ))
sleep 100
while true; do
    RUNNING=()
    for k in "${!PIDS[@]}"; do kill -0 ${PIDS[$k]} 2>/dev/null && RUNNING+=($k); done
    [ ${#RUNNING[@]} -le 1 ] && break
    LATE=$($PY - "$OUT/runs" $((DEADLINE - $(date +%s))) $EVAL_EVERY $TOTAL "${RUNNING[@]}" <<'PYEOF'
import csv, glob, sys
root, left, every, total = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
late = 0
for k in sys.argv[5:]:
    rows = [r for f in glob.glob(f"{root}/s{k}/**/metrics.csv", recursive=True) for r in csv.DictReader(open(f))]
    if not rows or float(rows[-1]["steps_per_s"]) <= 0:
        continue
    step, rate = int(rows[-1]["step"]), float(rows[-1]["steps_per_s"])
    need = (total - step) / rate + 20 * ((total // every) - (step // every))
    print(f"  seed {k}: step {step}, {rate:.0f} steps/s, needs ~{need:.0f} s of {left:.0f} s", file=sys.stderr)
    late |= need > left
print(int(late))
PYEOF
)
    if [ "$LATE" = 1 ]; then
        LAST=$(printf '%s\n' "${RUNNING[@]}" | sort -n | tail -1)
        stage "watchdog: stopping seed $LAST so the others finish in time"
        kill -TERM -- -${PIDS[$LAST]} 2>/dev/null
        unset "PIDS[$LAST]"
        sleep 60
    else
        sleep 30
    fi
done
wait
for f in $(find "$OUT/runs" -name eval.csv | sort); do echo "$f"; tail -3 "$f"; done
for f in "$OUT"/learn_drqv2_s*.log; do echo "$f"; tail -4 "$f"; done
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
