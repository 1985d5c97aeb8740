#!/usr/bin/env bash
# One lease on a lent CUDA machine, as a GPU runner's user would run the suite: the steps named on the
# command line, in order, each under its own time limit, everything logged under $OUT.
#
#   bash benchmarks/gpu_session.sh install doctor checks profile smoke pack
#   bash benchmarks/gpu_session.sh install triton      # the triton paths (variants.kernels): ~8 minutes
#
# `triton` checks the triton paths compiled on the GPU (tests/test_variants/triton/test_triton.py: float32 against dense
# float64 at n = 1, 61, 130, 257, output and gradients; bf16 at n = 130; the kernel families), then profiles them beside FlexAttention, SDPA and
# flash-linear-attention (bf16, B = 1, H = 16, d = 64, n = 16384 and 65536, random and bigbird at 32768
# too, fwd and fwd_bwd, each checked against dense float64 at n = 2048) and prints the criteria,
# PASS or FAIL (benchmarks/triton_criteria.py). Files: $OUT/gpu_profile/<device>-<date>/, to commit as
# benchmarks/gpu_profile/<device>-<date>/. flash-linear-attention travels as a wheel: before the lease,
# `pip download --no-deps -d .whl fla-core==0.6.0 einops` (pure Python), and carry .whl.
#
# The machine has torch, triton, pandas, seaborn, scipy, jinja2 and pytest and no network: packages it
# lacks travel as wheels in .whl/ (xformers and the peers; see docs/gpu.md).
# Results of earlier calls travel back in as results/ (carried) so that `--resume` finishes a run.
set -u
PR_ARGS=${PR_ARGS:-}; GRID_ARGS=${GRID_ARGS:-}
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
log() { echo "== $(date +%T) $*" | tee -a "$OUT/steps.txt"; }

install() {
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  fi
  python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . || return 1
  python3 -c "import suite, variants, torch; print('suite installed beside torch', torch.__version__)"
}

run_grid() {  # run_grid LIMIT_S RUN_ID ARGS...: a run, resumed when an earlier call left it unfinished
  local limit=$1 id=$2; shift 2
  if [ -f "results/$id/plan.json" ]; then  # NB: a resumed run takes its grid and devices from its plan
    timeout "$limit" python3 -m suite run --resume "$id" --no-report > "$OUT/$id.log" 2>&1
  else
    timeout "$limit" python3 -m suite run --run-id "$id" --no-report "$@" > "$OUT/$id.log" 2>&1
  fi
  echo "exit $?"; tail -n 4 "$OUT/$id.log"
}

triton_step() {  # the triton paths: checked on the GPU, then profiled beside their yardsticks
  local dir="$OUT/gpu_profile/$(python3 -c 'import torch; print(torch.cuda.get_device_name(0).split()[1].lower())')-$(date +%F)"
  mkdir -p "$dir"
  python3 -c "import triton, torch; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(0))" | tee "$dir/env.txt"
  # float16 is checked on the CPU (the interpreter): here float32 and bf16, each a kernel compile
  timeout 200 python3 -m pytest -q tests/test_variants/triton/test_triton.py -k "not float16" 2>&1 | tail -n 15 | tee "$dir/tests.txt"
  timeout 300 python3 benchmarks/gpu_profile.py "$dir/triton.json" --set triton --n 16384,65536 --series 32768 \
    --rep 50 --check 2048 --check-impls triton --criteria 2>&1 | grep -v -i warn | tee "$dir/triton.txt"
}

step() {
  case $1 in
    install) install ;;
    doctor) python3 -m suite doctor --device cuda 2>&1 | tee "$OUT/doctor.txt" ;;
    tests) timeout 120 python3 -m pytest -q tests/test_variants/impls/test_cuda_paths.py 2>&1 | tail -n 15 ;;
    checks) timeout 240 python3 benchmarks/gpu_checks.py "$OUT/gpu_checks.json" 2>&1 | tee "$OUT/checks.txt" ;;
    triton) triton_step ;;
    profile) timeout 240 python3 benchmarks/gpu_profile.py "$OUT/profile.json" --check 4096 --rep 100 2>&1 | grep -v -i warn | tee "$OUT/profile.txt" ;;
    smoke) run_grid "${SMOKE_S:-300}" gpu-smoke --grid smoke --device cuda ;;
    pr) run_grid "${PR_S:-240}" gpu-pr-a --grid pr $PR_ARGS; run_grid "${PR_S:-240}" gpu-pr-b --grid pr $PR_ARGS;
        python3 -m suite compare gpu-pr-a gpu-pr-b 2>&1 | tail -n 25 | tee "$OUT/compare.txt" ;;
    grid) run_grid "${GRID_S:-480}" gpu-grid --grid benchmarks/gpu.toml $GRID_ARGS ;;
    pack) tar czf "$OUT/results.tgz" results/gpu-* 2>/dev/null; ls -la "$OUT" ;;
    *) echo "unknown step $1"; return 2 ;;
  esac
}

[ -d /tmp/site ] && export PYTHONPATH=/tmp/site
for name in "$@"; do
  log "$name"
  step "$name"
  [ -d /tmp/site ] && export PYTHONPATH=/tmp/site
done
