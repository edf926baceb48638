#!/usr/bin/env bash
# Every GPU check of the project in one pass, sized to a short lease on a CUDA machine:
#   1. the card, torch, and one headless DMC frame (EGL must not return a black image);
#   2. `update --algo ALL --device cuda` (imperative vs functional eager vs +cudagraph);
#   3. `peers --device cuda` update tasks (rlfunc vs Stable-Baselines3 / TorchRL on the same card);
#   4. tests/test_gpu_path.py and the eager CUDA-graph tests of tests/test_population_compile.py;
#   5. DrQ-v2 on DMC cartpole_balance with the official settings, 3 seeds x 100k frames, on CUDA
#      with the update replayed as a CUDA graph, one process per seed sharing the card;
#   6. if time is left: the peers training-loop and replay tasks, then REDQ's compiled (+cudagraph) update;
#   MuJoCo learning stages (#26), only when named in STAGES, each one call of <= 9 minutes that continues
#   across calls (module text below, "MuJoCo stages"): redq_hopper, redq_population, rlpd_data, rlpd_hopper;
#   r2d2_actors (when named): distributed R2D2's actors 1 2 4 8 14 on the machine's CPU cores (#25); the
#   image lacks Ray and its official wheel (79 MB) does not fit a call's 64 MiB carry: carry the `ray`
#   wheel set (`bash benchmarks/gpu_wheels.sh ray`: a slimmed Ray, 40 MB; 42 MB with its needs).
#   r2d2_atari (when named): distributed R2D2 on Atari Pong (configs/r2d2/atari_pong_distributed.yaml, 14 actors,
#   learner on cuda) until the budget, resumed by the next call while the machine stays warm (wheel sets ray atari).
# Wheel sets (benchmarks/gpu_wheels.sh, into .whl/, carried as .whl): the default set (no argument) serves
# every stage but r2d2_actors and r2d2_atari; `ray` serves r2d2_actors, `ray atari` r2d2_atari (and r2d2_actors);
# a call carries one of them (the default set and ray together exceed the 64 MiB).
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
# Wheels carried in .whl/ (benchmarks/gpu_wheels.sh: what the device image lacks) go into /tmp/site first.
if ls .whl/*.whl >/dev/null 2>&1 && [ "${TINY:-0}" != 1 ]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} && echo "installed $(ls .whl | wc -l) wheels from .whl into /tmp/site"
fi
SEEDS=${DRQV2_SEEDS:-3}
FIRST_SEED=${DRQV2_FIRST_SEED:-0}
EVAL_EVERY=${DRQV2_EVAL_EVERY:-25000}
DRQV2_CONFIG=configs/drqv2/cartpole_balance.yaml
TOTAL=$(sed -n 's/^ *total_steps: *\([0-9]*\).*/\1/p' $DRQV2_CONFIG)  # agent steps (50000 = 100k frames)
if [ "${TINY:-0}" = 1 ]; then  # the CPU dry run: a few hundred agent steps, fast render, small batch
    TOTAL=${TINY_STEPS:-400}
    EVAL_EVERY=200
    DRQV2_DEV=(--set train.device=cpu --set train.total_steps=$TOTAL --set train.learning_starts=100
               --set agent.batch_size=8 --set env.kwargs.fast_render=true)
    DRQV2_ON="the CPU (TINY dry run, $TOTAL agent steps)"
else
    DRQV2_DEV=(--set train.device=cuda --set train.cuda_graph=true)
    DRQV2_ON="cuda, 100k frames"
fi
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
# the vmapped update replayed as one CUDA graph (eager; the compiled variants cost minutes of compile)
timeout $(( $(left) < 120 ? $(left) : 120 )) $PY -m pytest -q -rs -p no:cacheprovider tests/test_population_compile.py \
    -k "cuda_graph and eager" > "$OUT/pytest_population_cuda.log" 2>&1
tail -8 "$OUT/pytest_population_cuda.log"
fi

if want drqv2; then
stage "DrQ-v2 faithful: $SEEDS seed(s) from $FIRST_SEED on $DRQV2_ON, one process each"
LEARN_S=$(($(left) - 40))
mkdir -p "$OUT/runs"
declare -A PIDS
for ((k = FIRST_SEED; k < FIRST_SEED + SEEDS; k++)); do
    setsid timeout $LEARN_S $PY benchmarks/run.py learn --config $DRQV2_CONFIG --seeds 1 \
        --first-seed $k --threads 1 "${DRQV2_DEV[@]}" \
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

# ------------------------------------------------------------------ MuJoCo stages (#26)
# Each trains for what is left of the budget, then stops the run with SIGTERM (the trainer saves a
# checkpoint), writes its learn JSON (+ PNG) to OUT_DIR and packs its work folder (run directory +
# calls.jsonl, one line per call: date, card, torch, command, exit code) as NAME.tgz.part-NN files
# of <= 15 MiB in OUT_DIR. The next call continues it with `rlfunc resume` when those parts are in
# CARRY (default .gpu_carry, a folder of the checkout that .git/info/exclude ignores, named in the
# device tool's `carry`): copy the returned parts there before the call. Stages, one per call:
#   redq_hopper      REDQ configs/redq/hopper.yaml (paper settings) on cuda, compiled + CUDA graph,
#                    to 125k env steps (two calls at ~180 steps/s) -> learn_redq_hopper_gpu.json
#   population_update  benchmarks/run.py population --update-only --algo redq --device cuda --cuda-graph,
#                    P = POP_MEMBERS (1 2 4 8 10 16 32): the vmapped update of P members (one graph) against
#                    P single updates (P graphs) at the Hopper shapes -> population_redq_update_only_cuda.json
#                    (#24's GPU goal: P=10 costs <= 2x P=1); POP_COMPILE (default "1 10": --compile at those P,
#                    both sides compiled per step as the trainers compile them; "" for eager only); then the
#                    same eager + graph with TF32 matmuls on both sides (--matmul-precision high, as JAX computes
#                    float32 matmuls on these GPUs by default) -> population_redq_update_only_matmul_high_cuda.json
#   population_env   benchmarks/run.py population --algo redq --env Hopper-v5 --device cuda --cuda-graph, P = POP_MEMBERS
#                    (default 1 2 4 8 10): full env steps (act, Hopper step, store, learn) of P members as one
#                    population against P single learners in one process, eager and compiled at P = POP_COMPILE
#                    -> population_redq_hopper_cuda.json (#24's table: env steps/s per member and in total, memory);
#                    then the same without the update (--collect-only) -> population_redq_hopper_collect_cuda.json
#   redq_hopper      (REDQ_HOPPER_S caps its time, e.g. a short single-seed run whose env steps/s the
#                    population's are compared with)
#   redq_population  the same config, seeds POP_SEEDS (0-9) as one population in one process, compiled
#                    (each vmapped step, redq.make_population_update: 28 s for P=4 on the 2-core CPU, where
#                    the whole vmapped G=20 update took 254 s; one-off timings) + CUDA graph -> learn_redq_hopper_population.json
#                    (the 2026-11-28 lease ran it eager behind the graph: the per-step compile came after);
#                    its checkpoint holds 10 replays, so it is packed only while it fits (PACK_MB);
#                    POP_CHECKPOINT_EVERY (default 5000) spaces its checkpoints (each writes every replay)
#   rlpd_data        the locomotion datasets made on the machine's CPU (benchmarks/run.py
#                    locomotion-data, the same command as the committed locomotion_data_hopper.json)
#                    -> locomotion_data_hopper_gpu.json + locomotion_data.tgz.part-NN (skip it by
#                    carrying hopper-medium.npz in CARRY: 2.8 MB, check its SHA-256 against the JSON)
#   rlpd_hopper      RLPD configs/rlpd/hopper.yaml on CARRY/hopper-medium.npz, seeds RLPD_SEEDS (0-2)
#                    as one population -> learn_rlpd_hopper_gpu.json, merged with REDQ from scratch
#                    (CARRY/learn_redq_hopper_population.json, or this call's) at the same online steps
# PACK=0 packs nothing (runs continue only on a warm machine: set GPU_WORK to an ignored folder of the
# checkout, e.g. runs/gpu_work, which the device tool keeps between calls); BUNDLE=1 puts the logs and
# plots into OUT/bundle_logs.tgz and every run's CSVs and config into OUT/work_csv.tgz (the tool returns 8 files).
# MATMUL=high runs the training stages' float32 matmuls in TF32 (train.matmul_precision; recorded in each
# run's config.yaml); unset keeps full float32, as the official PyTorch code.
# TINY=1 is a CPU dry run of these stages (tiny agents, TINY_STEPS env steps, no compile; MIN_STAGE_S=10
# lets a short budget start them) to check the shell logic: pack, carry, resume, JSON.
# The device machine lacks tensordict, gymnasium, mujoco, dm-control and minari: `bash benchmarks/gpu_wheels.sh`
# (the default set) here puts their wheels in .whl/, carried with the call and installed at the top into /tmp/site.
CARRY=${CARRY:-.gpu_carry}
WORK=${GPU_WORK:-/tmp/gpu_checks_work}
RLFUNC=($PY -m rlfunc.runtime.cli)  # the `rlfunc` command, from this checkout
# PACK_MB: what a later call can carry of a packed run beside this checkout, its wheels and the data: 64 MiB
# less this tree's files (what the device tool copies: no .git, runs/, caches, .whl or CARRY), less .whl, less
# 3 MiB (hopper-medium.npz) and 2 MiB of margin, as measured here (the checkout grows with the results)
if [ -z "${PACK_MB:-}" ]; then
    TREE_MB=$(du -sm --exclude=./.git --exclude=./runs --exclude=__pycache__ --exclude='*.egg-info' --exclude=./.whl \
              --exclude="./$CARRY" . 2>/dev/null | cut -f1)
    WHL_MB=$(du -sm .whl 2>/dev/null | cut -f1)
    PACK_MB=$(( 64 - ${TREE_MB:-14} - ${WHL_MB:-0} - 3 - 2 ))
fi
POP_SEEDS=${POP_SEEDS:-0-9}
RLPD_SEEDS=${RLPD_SEEDS:-0-2}
DATA=${RLPD_DATA:-$CARRY/hopper-medium.npz}
mkdir -p "$WORK"
if [ "${TINY:-0}" = 1 ]; then
    DEV=cpu
    ACCEL=(--set train.threads=1)
    POP_ACCEL=(--set train.threads=1)
    SIZE=(--set agent.hidden_sizes=[16,16] --set agent.batch_size=16 --set agent.num_critics=3 --set agent.updates_per_step=2
          --set train.total_steps=${TINY_STEPS:-400} --set train.learning_starts=100 --set train.eval_every=100
          --set train.eval_episodes=1 --set train.checkpoint_every=100)
    DATA_ARGS=(--agent-steps 15000 --steps 2000 --random-steps 500)
else
    DEV=cuda
    ACCEL=(--set train.device=cuda --set train.compile=true --set train.cuda_graph=true)
    POP_ACCEL=(--set train.device=cuda --set train.compile=true --set train.cuda_graph=true)
    # MATMUL=high: the populations and runs compute float32 matmuls in TF32 (train.matmul_precision)
    [ -n "${MATMUL:-}" ] && POP_ACCEL+=(--set "train.matmul_precision=$MATMUL")
    SIZE=()
    DATA_ARGS=(--agent-steps 30000)
fi
COMMON=(--set train.keep_checkpoints=1 --set train.progress=false --set train.tensorboard=false)

unpack() {  # NAME: the work folder from CARRY's NAME.tgz.part-NN, unless this machine has it already
    if [ ! -d "$WORK/$1" ] && ls "$CARRY/$1.tgz.part-"* >/dev/null 2>&1; then
        cat "$CARRY/$1.tgz.part-"* | tar xzf - -C "$WORK" && echo "unpacked $1 from $CARRY"
    fi
}
pack() {  # NAME: OUT/NAME.tgz.part-NN (<= 15 MiB each) when the folder packs under PACK_MB
    [ "${PACK:-1}" = 0 ] && { echo "not packed: PACK=0 (a later call continues it only on this warm machine)"; return; }
    tar czf "$WORK/$1.tgz" -C "$WORK" "$1"
    local mb=$(( $(stat -c %s "$WORK/$1.tgz") / 1048576 ))
    if [ "$mb" -le "$PACK_MB" ]; then
        split -b 15m -d "$WORK/$1.tgz" "$OUT/$1.tgz.part-" && echo "packed $1: $mb MiB in $(ls "$OUT/$1.tgz.part-"* | wc -l) part(s)"
    else
        echo "not packed: $1 is $mb MiB, over PACK_MB=$PACK_MB (what a later call can carry beside the wheels); it cannot continue in a later call"
    fi
    rm -f "$WORK/$1.tgz"
}
train_or_resume() {  # NAME CONFIG SEEDS(-|0-9) ARGS...: train (first call) or resume (later calls) until the budget
    local name=$1 config=$2 seeds=$3; shift 3
    local run="$WORK/$name/run" limit=$(( $(left) - 75 ))
    if [ -n "${CAP:-}" ] && [ "$CAP" -lt "$limit" ]; then limit=$CAP; fi  # CAP=S train_or_resume ...: at most S s
    local cmd
    mkdir -p "$WORK/$name"
    if [ -f "$run/config.yaml" ]; then
        cmd=("${RLFUNC[@]}" resume "$run")
    else
        cmd=("${RLFUNC[@]}" train "$config" --run-dir "$run" "$@")
        [ "$seeds" != - ] && cmd+=(--seeds "$seeds")
    fi
    if [ "$limit" -lt "${MIN_STAGE_S:-60}" ]; then echo "$name: under ${MIN_STAGE_S:-60} s left, not started"; return 1; fi
    stage "$name: ${cmd[*]} (stopped with SIGTERM after $limit s; it saves)"
    timeout -k 60 -s TERM "$limit" "${cmd[@]}" > "$OUT/$name.log" 2>&1
    local rc=$?
    tail -5 "$OUT/$name.log"
    $PY - "$WORK/$name/calls.jsonl" "$rc" "$limit" "${cmd[@]}" <<'PYEOF'
import datetime, json, shlex, sys, torch
path, rc, limit, cmd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
card = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (cpu)"
line = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "card": card,
        "torch": torch.__version__, "command": shlex.join(cmd), "limit_s": limit, "exit_code": rc,
        "stopped_by_budget": rc in (124, 137, 143)}
open(path, "a").write(json.dumps(line) + "\n")
PYEOF
}
record() {  # NAME JSON LABEL [RUN_DIRS...]: learn-collect the run directories, then add machine and calls
    local name=$1 json=$2 label=$3; shift 3
    $PY benchmarks/run.py learn-collect "$@" --out "$json" --label "$label" \
        --note "gpu_checks.sh stage $name: trained in one or more calls of <= 9 minutes, each continuing the last through rlfunc resume; 'calls' lists them" \
        > "$OUT/$name.collect.log" 2>&1 || { tail -3 "$OUT/$name.collect.log"; return; }
    $PY - "$json" "$WORK/$name/calls.jsonl" "$DEV" <<'PYEOF'
import json, sys
sys.path.insert(0, ".")
import torch
from benchmarks.run import machine_info
path, calls, dev = sys.argv[1], sys.argv[2], sys.argv[3]
result = json.load(open(path))
machine = machine_info(torch.device(dev if torch.cuda.is_available() else "cpu"), allocator_tuned=False)
machine["recorded"] = "the machine of the last call (learn-collect's own record replaced: it ran here too)"
result = {**result, "machine": machine, "calls": [json.loads(l) for l in open(calls)]}
json.dump(result, open(path, "w"), indent=2)
print(f"{path}: " + ", ".join(f"{r['algo']} s{r['seed']} {r['final_return']:.0f} @ {r['env_steps']}" for r in result["runs"]))
PYEOF
}

if want population_update; then
    if [ "${TINY:-0}" = 1 ]; then PU=(--device cpu --quick --members 1 2); else PU=(--device cuda --cuda-graph --members ${POP_MEMBERS:-1 2 4 8 10 16 32}); fi
    POP_COMPILE=${POP_COMPILE-1 10}
    [ -n "$POP_COMPILE" ] && PU+=(--compile $POP_COMPILE)
    stage "population_update: benchmarks/run.py population --update-only --algo redq ${PU[*]}"
    timeout -k 10 $(( $(left) < 300 ? $(left) : 300 )) $PY benchmarks/run.py population --update-only --algo redq "${PU[@]}" \
        --repeats 3 --steps 10 --out "$OUT/population_redq_update_only_cuda.json" 2>&1 | tee "$OUT/population_update.log" | tail -12
    # TF32: each member's ~24 GFLOP of float32 products per env step is what P=10 adds over P=1 on the card.
    if [ "${TINY:-0}" = 1 ]; then PT=(--device cpu --quick --members 1 2); else PT=(--device cuda --cuda-graph --members ${POP_MEMBERS:-1 2 4 8 10 16 32}); fi
    timeout -k 10 $(( $(left) < 150 ? $(left) : 150 )) $PY benchmarks/run.py population --update-only --algo redq "${PT[@]}" \
        --matmul-precision high --repeats 3 --steps 10 --out "$OUT/population_redq_update_only_matmul_high_cuda.json" 2>&1 \
        | tee -a "$OUT/population_update.log" | tail -8
fi

if want population_env; then
    if [ "${TINY:-0}" = 1 ]; then PE=(--device cpu --quick --members 1 2); else PE=(--device cuda --cuda-graph --members ${POP_MEMBERS:-1 2 4 8 10}); fi
    POP_COMPILE=${POP_COMPILE-1 10}
    [ -n "$POP_COMPILE" ] && PE+=(--compile $POP_COMPILE)
    stage "population_env: benchmarks/run.py population --algo redq --env Hopper-v5 ${PE[*]}"
    timeout -k 10 $(( $(left) < 360 ? $(left) : 360 )) $PY benchmarks/run.py population --algo redq --env Hopper-v5 "${PE[@]}" \
        --repeats 3 --steps 3 --out "$OUT/population_redq_hopper_cuda.json" 2>&1 | tee "$OUT/population_env.log" | tail -12
    # The same env steps without the update (act, the members' one vector env, the batched replay write): what a
    # population step costs besides its update on this machine (about a minute).
    if [ "${TINY:-0}" = 1 ]; then PC=(--device cpu --quick --members 1 2); else PC=(--device cuda --members ${POP_MEMBERS:-1 2 4 8 10}); fi
    timeout -k 10 $(( $(left) < 120 ? $(left) : 120 )) $PY benchmarks/run.py population --collect-only --algo redq --env Hopper-v5 \
        "${PC[@]}" --repeats 5 --steps 50 --out "$OUT/population_redq_hopper_collect_cuda.json" 2>&1 | tee -a "$OUT/population_env.log" | tail -6
fi

if want redq_hopper; then
    unpack redq_hopper
    CAP=${REDQ_HOPPER_S:-} train_or_resume redq_hopper configs/redq/hopper.yaml - "${ACCEL[@]}" "${COMMON[@]}" "${SIZE[@]}" && {
        record redq_hopper "$OUT/learn_redq_hopper_gpu.json" redq "$WORK/redq_hopper/run"
        pack redq_hopper; }
fi

if want redq_population; then
    unpack redq_population
    train_or_resume redq_population configs/redq/hopper.yaml "$POP_SEEDS" "${POP_ACCEL[@]}" "${COMMON[@]}" "${SIZE[@]}" \
        --set train.checkpoint_every=${POP_CHECKPOINT_EVERY:-5000} && {
        record redq_population "$OUT/learn_redq_hopper_population.json" redq "$WORK/redq_population/run"/member-*
        pack redq_population; }
fi

if want rlpd_data; then
    stage "rlpd_data: benchmarks/run.py locomotion-data --env hopper ${DATA_ARGS[*]} on this machine's CPU"
    unpack locomotion_data
    OMP_NUM_THREADS=1 timeout -k 60 -s TERM $(( $(left) - 60 )) $PY benchmarks/run.py locomotion-data --env hopper \
        --root "$WORK/locomotion_data" "${DATA_ARGS[@]}" --out "$OUT/locomotion_data_hopper_gpu.json" \
        > "$OUT/rlpd_data.log" 2>&1
    tail -8 "$OUT/rlpd_data.log"
    cp "$WORK/locomotion_data/hopper-medium.npz" "$OUT/" 2>/dev/null
    [ -f "$OUT/hopper-medium.npz" ] || pack locomotion_data  # cut off: carry the agent run to continue it
fi

if want rlpd_hopper; then
    [ -f "$DATA" ] || DATA="$WORK/locomotion_data/hopper-medium.npz"
    if [ ! -f "$DATA" ]; then
        echo "rlpd_hopper: no prior data: copy hopper-medium.npz (benchmarks/run.py locomotion-data) into $CARRY, or run STAGES=rlpd_data first"
        DATA=""
    else
        sha256sum "$DATA"
        unpack rlpd_hopper
        train_or_resume rlpd_hopper configs/rlpd/hopper.yaml "$RLPD_SEEDS" --set "data.path=$(realpath "$DATA")" \
            "${POP_ACCEL[@]}" "${COMMON[@]}" "${SIZE[@]}" || DATA=""
    fi
    if [ -n "$DATA" ]; then
        record rlpd_hopper "$WORK/learn_rlpd_hopper_gpu_rlpd.json" rlpd "$WORK/rlpd_hopper/run"/member-*
        REDQ_JSON=""
        for f in "$OUT/learn_redq_hopper_population.json" "$CARRY/learn_redq_hopper_population.json"; do
            [ -f "$f" ] && { REDQ_JSON=$f; break; }
        done
        if [ -n "$REDQ_JSON" ]; then
            $PY benchmarks/run.py learn-merge "$WORK/learn_rlpd_hopper_gpu_rlpd.json" "$REDQ_JSON" \
                --out "$OUT/learn_rlpd_hopper_gpu.json" --title "Hopper-v5: RLPD on local medium data vs REDQ from scratch" \
                --note "RLPD (prior data: $(sha256sum "$DATA" | cut -c1-16)...) vs REDQ from scratch; compare at the same online env steps" \
                2>&1 | tail -6
        else
            cp "$WORK/learn_rlpd_hopper_gpu_rlpd.json" "$OUT/learn_rlpd_hopper_gpu.json"
            echo "rlpd_hopper: no REDQ population JSON in $OUT or $CARRY yet: learn_rlpd_hopper_gpu.json holds RLPD alone"
        fi
        pack rlpd_hopper
    fi
fi
if want r2d2_actors; then  # #25: distributed R2D2's actor scaling on the 16 CPU cores beside the card
    # One JSON at the end of the command (benchmarks/run.py distributed): 2 runs per actor count (learner
    # paused, with learner), each a window of R2D2_SECONDS (default: what is left over 2 x 5 runs, at most
    # 20 s) after its actors started (~15-25 s on 16 cores), so the whole stage fits the budget left.
    if [ "${TINY:-0}" = 1 ]; then R2D2_ACTORS=${R2D2_ACTORS:-1 2}; else R2D2_ACTORS=${R2D2_ACTORS:-1 2 4 8 14}; fi
    NRUNS=$((2 * $(echo $R2D2_ACTORS | wc -w)))
    SECONDS_PER_RUN=${R2D2_SECONDS:-$(( ($(left) - 60) / NRUNS - 25 ))}
    [ "$SECONDS_PER_RUN" -gt 20 ] && [ -z "${R2D2_SECONDS:-}" ] && SECONDS_PER_RUN=20
    if ! $PY -c "import ray" 2>/dev/null; then
        echo "r2d2_actors: Ray is not installed here: carry the ray wheel set (bash benchmarks/gpu_wheels.sh ray, .whl in carry); not run"
    elif [ "$SECONDS_PER_RUN" -lt 3 ]; then
        echo "r2d2_actors: $(left) s left, too little for $NRUNS runs; not run"
    else
        CMD=($PY benchmarks/run.py distributed --actors $R2D2_ACTORS --seconds $SECONDS_PER_RUN
             --out "$OUT/distributed_r2d2_16core.json")
        stage "r2d2_actors: ${CMD[*]} (ray from $($PY -c 'import ray, os; print(os.path.dirname(ray.__file__))'))"
        OMP_NUM_THREADS=1 timeout -k 30 -s TERM $(( $(left) - 20 )) "${CMD[@]}" > "$OUT/r2d2_actors.log" 2>&1
        RC=$?
        tail -12 "$OUT/r2d2_actors.log"
        $PY - "$OUT/distributed_r2d2_16core.json" "$RC" "${CMD[@]}" <<'PYEOF'
import datetime, json, os, shlex, sys, torch, ray
path, rc, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
call = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "card": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (cpu)",
        "torch": torch.__version__, "ray": ray.__version__, "ray_path": os.path.dirname(ray.__file__),
        "cpu_cores": os.cpu_count(), "command": shlex.join(cmd), "exit_code": rc}
if not os.path.exists(path):
    print(f"r2d2_actors: no {path} (exit code {rc}): the log has each finished run's line")
    sys.exit(0)
result = json.load(open(path))
result = {"calls": [call], **result}
json.dump(result, open(path, "w"), indent=2)
print(f"{path}: card {call['card']}, torch {call['torch']}, ray {call['ray']}")
PYEOF
    fi
fi
if want r2d2_atari; then  # #26 3.3: distributed R2D2 on Atari Pong, 14 actors on the CPU cores, learner on cuda
    # configs/r2d2/atari_pong_distributed.yaml (the paper's agent; 14 Ray actors x 2 envs) trains until the
    # budget (SIGTERM: it saves), and `rlfunc resume` continues it in the next call while the machine is
    # still warm: the run directory (WORK, on the device) holds a ~1.9 GB frame replay and never travels
    # through the carry, so on a fresh machine a call starts a new run. Needs the `ray atari` wheel sets
    # (slim Ray + ale-py; cv2 is in the image). Overrides (the config keeps the paper's settings): the
    # learner on cuda, eager (a compile of the 120-step unroll costs minutes per process), a 6250-window
    # replay (~1.9 GB with the LSTM states, the config's 25k ~7.5 GB: the SIGTERM checkpoint fits the disk and
    # the time), learning from 3125 windows, evaluation (3 greedy games) every 200k agent steps, checkpoints only at SIGTERM.
    #   -> learn_r2d2_atari_gpu.json: frames/s, learner calls, replay ratio, the actors' return curve,
    #      the evaluations, and `calls` (date, card, torch, exact command, exit code of every call).
    ATARI_CONFIG=configs/r2d2/atari_pong_distributed.yaml
    if [ "${TINY:-0}" = 1 ]; then
        ATARI_SETS=(--set train.threads=1 --set distributed.actors=2 --set distributed.envs_per_actor=1
                    --set distributed.param_sync_steps=100 --set distributed.max_replay_ratio=0.05
                    --set distributed.min_replay_ratio=0 --set train.total_steps=${TINY_STEPS:-400}
                    --set train.learning_starts=8 --set train.replay_size=300 --set train.eval_every=100000000
                    --set train.checkpoint_every=100000000 --set train.compile=false --set agent.batch_size=8
                    --set agent.lstm_size=16 --set agent.head_sizes=[16] --set agent.burn_in=2
                    --set agent.sequence_length=4 --set agent.sequence_period=2 --set train.log_every=100)
    else
        ATARI_SETS=(--set train.device=cuda --set train.compile=false --set train.replay_size=6250
                    --set train.learning_starts=3125 --set train.eval_every=200000 --set train.eval_episodes=3
                    --set train.checkpoint_every=100000000 --set train.log_every=20000)
    fi
    if ! $PY -c "import ray, ale_py, cv2" 2>/dev/null; then
        echo "r2d2_atari: needs ray, ale_py and cv2 (bash benchmarks/gpu_wheels.sh ray atari, .whl in carry); not run"
    elif [ ! -f "$ATARI_CONFIG" ]; then
        echo "r2d2_atari: $ATARI_CONFIG is not in this checkout; not run"
    else
        [ -d "$WORK/r2d2_atari/run" ] && echo "r2d2_atari: continuing $WORK/r2d2_atari/run (this machine stayed warm)"
        RAY_USAGE_STATS_ENABLED=0 train_or_resume r2d2_atari "$ATARI_CONFIG" - "${ATARI_SETS[@]}" "${COMMON[@]}" && {
            cp "$WORK/r2d2_atari/run/metrics.csv" "$OUT/r2d2_atari_metrics.csv" 2>/dev/null
            cp "$WORK/r2d2_atari/run/eval.csv" "$OUT/r2d2_atari_eval.csv" 2>/dev/null
            $PY - "$WORK/r2d2_atari/run" "$OUT/learn_r2d2_atari_gpu.json" "$WORK/r2d2_atari/calls.jsonl" "$ATARI_CONFIG" <<'PYEOF'
import csv, json, os, sys
from pathlib import Path
run, out, calls, config = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
def num(row, key, default=float("nan")):
    try:
        return float(row.get(key) or default)
    except ValueError:
        return default
rows = list(csv.DictReader((run / "metrics.csv").open())) if (run / "metrics.csv").exists() else []
evals = list(csv.DictReader((run / "eval.csv").open())) if (run / "eval.csv").exists() else []
last = rows[-1] if rows else {}
steps, wall = int(num(last, "step", 0)), num(last, "time_s", 0)
curve = [[int(num(r, "step", 0)), num(r, "episode_return")] for r in rows if r.get("episode_return") not in (None, "", "nan")]
result = {
    "benchmark": "r2d2_atari_distributed",
    "config": config, "cpus": os.cpu_count(),
    "calls": [json.loads(line) for line in calls.open()],  # card, torch, exact command, exit code per call
    "agent_steps": steps, "frames": 4 * steps,  # AtariPreprocessing's frame skip 4
    "wall_s": wall, "frames_per_s": 4 * steps / wall if wall else None,
    "frames_per_s_last_window": 4 * num(last, "steps_per_s"),
    "learner_calls": int(num(last, "learner_calls", 0)), "replay_ratio": num(last, "replay_ratio"),
    "param_version": num(last, "param_version"),
    "episode_return_last": curve[-1][1] if curve else None,  # the actors' recent episodes (epsilon ladder)
    "episode_return_curve": curve,
    "eval": [[int(num(r, "step", 0)), num(r, "mean_return"), int(num(r, "episodes", 0))] for r in evals],
}
json.dump(result, out.open("w"), indent=1)
c = result["calls"][-1]
print(f"{out}: {steps} agent steps ({result['frames']} frames) in {wall:.0f} s over {len(result['calls'])} call(s), "
      f"{result['frames_per_s_last_window']:.0f} frames/s in the last window, {result['learner_calls']} learner calls, "
      f"last return {result['episode_return_last']}; card {c['card']}, torch {c['torch']}")
PYEOF
            echo "r2d2_atari: not packed (the frame replay is GBs); the next call resumes it only on this warm machine"
        }
    fi
fi
if [ "${BUNDLE:-0}" = 1 ]; then  # the device tool returns at most 8 files: logs, plots and the runs' CSVs in one
    (cd "$WORK" && find . \( -name '*.csv' -o -name config.yaml -o -name calls.jsonl \) -print0 \
        | tar czf "$OUT/work_csv.tgz" --null -T -)
    (cd "$OUT" && tar czf bundle_logs.tgz $(ls *.log *.png 2>/dev/null) && rm -f *.log *.png)
    ls -la "$OUT"
fi
stage "done"
