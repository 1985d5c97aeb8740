#!/usr/bin/env bash
# One lease on a lent CUDA machine, as a GPU runner's user would run the suite: the steps named on the
# command line, in order, each under its own time limit, everything logged under $OUT.
#
#   bash benchmarks/gpu_session.sh install doctor checks profile smoke pack
#   bash benchmarks/gpu_session.sh install triton pack  # the triton paths (variants/triton/): ~9 minutes cold
#   bash benchmarks/gpu_session.sh install coldwarm pack  # a first case's compile, cold and warm
#   bash benchmarks/gpu_session.sh install tiles triton pack  # the band's and the chunks' tile candidates first
#   bash benchmarks/gpu_session.sh install ab checks pack  # the regression gate on the GPU, then the timer's check
#
# `triton` profiles the triton paths beside FlexAttention, SDPA and flash-linear-attention (bf16, B = 1,
# H = 16, d = 64, n = 16384 and 65536, random and bigbird at 32768 too, fwd and fwd_bwd, each path checked
# against dense float64 at n = 2048) and prints the issue's criteria, PASS or FAIL (benchmarks/
# triton_criteria.py); then their tests compiled on the GPU (tests/test_variants/triton/test_triton.py:
# float32 against dense float64 at n = 1, 61, 130, 257, output and gradients; bf16 at n = 130; the kernel
# families). Files: .gpu_profile/<device>-<date>/, returned as $OUT/gpu_profile/<device>-<date>/, to commit
# as benchmarks/gpu_profile/<device>-<date>/. A profile stopped by its limit resumes on the next call: copy
# FILES_AT/gpu_profile/ back to .gpu_profile/ and carry it (with .compile-cache: a cold profile spends most
# of its time compiling). Before the lease, `python -m variants.triton.compile_check` (every launch
# compiled for sm_90 here) and `pip download --no-deps -d .whl fla-core==0.6.0` (pure Python; carry .whl).
#
# The machine has torch, triton, pandas, seaborn, scipy, jinja2 and pytest and no network: packages it
# lacks travel as wheels in .whl/ (xformers and the peers; see docs/gpu.md; adjustText for a report or card
# made there: the steps below make none).
# Results of earlier calls travel back in as results/ (carried) so that `--resume` finishes a run.
#
# Runs that finish across leases (15 minutes of device time each, the start included): the compile caches
# travel too, so a resumed run does not compile FlexAttention and the triton paths again. Inductor and Triton
# keep them in .compile-cache/ at the repository root (gitignored; never under results/, whose files are
# data and never executed; `python -m suite run --compile-cache DIR` sets the same two variables).
# `pack` returns $OUT/results.tgz, $OUT/compile-cache.tgz (in parts .0, .1, ... of COMPILE_CACHE_PART_BYTES,
# 15 MiB, where it is larger: a returned file holds 16 MiB at most) and every other file of $OUT in
# $OUT/logs.tgz (at most 8 files come back); before the next call, here:
#
#   tar xzf FILES_AT/results.tgz && mkdir -p .compile-cache && cp FILES_AT/compile-cache.tgz* .compile-cache/
#
# and carry both: `carry: [".compile-cache", "results"]`. `install` (or `unpack`) extracts the carried
# tarball (or its parts, joined) in place. The carry holds 64 MiB in all, so `pack` keeps the tarball under
# COMPILE_CACHE_MAX_BYTES (40 MiB): over it, the oldest entries (by modification time) go until it fits, each one a kernel compiled
# again on its next use, never a wrong one (both caches are keyed by content); if it cannot fit, no tarball
# is returned and the next call compiles cold. NB: Triton's cache names its files by absolute path, so its
# entries hit only where the repository lies at the same path on every call. `coldwarm` measures what the
# cache saves: a fresh process's first FlexAttention case cold and warm ($OUT/coldwarm.txt).
set -u
PR_ARGS=${PR_ARGS:-}; GRID_ARGS=${GRID_ARGS:-}
OUT=${OUT:-/tmp/gpu_out}
CACHE=.compile-cache
COMPILE_CACHE_MAX_BYTES=${COMPILE_CACHE_MAX_BYTES:-$((40 << 20))}
COMPILE_CACHE_PART_BYTES=${COMPILE_CACHE_PART_BYTES:-$((15 << 20))}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR="$PWD/$CACHE/inductor" TRITON_CACHE_DIR="$PWD/$CACHE/triton"
log() { echo "== $(date +%T) $*" | tee -a "$OUT/steps.txt"; }

unpack_cache() {  # the carried tarball (or its parts, joined in order), extracted where the variables point
  if [ -f "$CACHE/compile-cache.tgz" ]; then
    tar xzf "$CACHE/compile-cache.tgz" -C "$CACHE" && echo "compile cache: $(du -sh "$CACHE" | cut -f1) carried in"
  elif [ -f "$CACHE/compile-cache.tgz.0" ]; then
    cat "$CACHE"/compile-cache.tgz.[0-9] | tar xz -C "$CACHE" &&  # NB: one digit each (split -a 1), so the glob's order
      echo "compile cache: $(du -sh "$CACHE" | cut -f1) carried in ($(ls "$CACHE"/compile-cache.tgz.[0-9] | wc -l) parts)"
  else
    echo "compile cache: none carried in (cold)"
  fi
}

cache_entries() {  # "mtime bytes path" per entry: a Triton kernel's folder, an inductor cache's subfolder
  { find "$CACHE/triton" -mindepth 1 -maxdepth 1; find "$CACHE/inductor" -mindepth 2 -maxdepth 2; } 2>/dev/null |
    while read -r entry; do echo "$(stat -c %Y "$entry") $(du -sb "$entry" | cut -f1) $entry"; done
}

prune_cache() {  # prune_cache BYTES: keep the newest entries holding BYTES at most, remove the rest
  cache_entries | sort -rn | awk -v keep="$1" '{ total += $2 } total > keep { sub(/^[^ ]+ [^ ]+ /, ""); print }' |
    while read -r entry; do rm -rf "$entry"; done
}

pack_cache() {  # $OUT/compile-cache.tgz under COMPILE_CACHE_MAX_BYTES, pruned to fit, or none
  local parts=() part size total round tgz="$OUT/compile-cache.tgz"
  for part in inductor triton; do [ -d "$CACHE/$part" ] && parts+=("$part"); done
  if [ ${#parts[@]} = 0 ]; then echo "compile cache: empty, nothing packed"; return 0; fi
  for round in 1 2 3; do
    tar czf "$tgz" -C "$CACHE" "${parts[@]}" || return 1
    size=$(stat -c %s "$tgz")
    if [ "$size" -le "$COMPILE_CACHE_MAX_BYTES" ]; then echo "compile cache: $size bytes packed"; split_parts "$tgz"; return 0; fi
    total=$(du -sb "$CACHE/inductor" "$CACHE/triton" 2>/dev/null | awk '{ t += $1 } END { print t }')
    echo "compile cache: $size bytes packed, over $COMPILE_CACHE_MAX_BYTES: pruning (round $round)"
    prune_cache "$(awk -v t="$total" -v s="$size" -v m="$COMPILE_CACHE_MAX_BYTES" 'BEGIN { printf "%d", 0.9 * t * m / s }')"
  done
  rm -f "$tgz"
  echo "compile cache: still over $COMPILE_CACHE_MAX_BYTES bytes after pruning: not returned (the next call compiles cold)"
}

split_parts() {  # split_parts FILE: FILE.0, FILE.1, ... of COMPILE_CACHE_PART_BYTES each where FILE is larger
  [ "$(stat -c %s "$1")" -gt "$COMPILE_CACHE_PART_BYTES" ] || return 0
  split -b "$COMPILE_CACHE_PART_BYTES" -d -a 1 "$1" "$1." && rm -f "$1" && echo "  in $(ls "$1".* | wc -l) parts"
}

bundle_logs() {  # every file of $OUT but the tarballs and steps.txt, in $OUT/logs.tgz
  local files
  files=$(cd "$OUT" && find . -type f ! -name '*.tgz' ! -name '*.tgz.[0-9]' ! -name steps.txt ! -name logs.tgz | sort)
  [ -n "$files" ] || return 0
  (cd "$OUT" && echo "$files" | tar czf logs.tgz -T - && echo "$files" | xargs rm -f && find . -mindepth 1 -type d -empty -delete)
}

coldwarm() {  # a fresh process's first FlexAttention case, with an empty compile cache, then with the one it filled
  local cache state began code
  cache=$(mktemp -d)
  for state in cold warm; do
    began=$(date +%s.%N)
    TORCHINDUCTOR_CACHE_DIR="$cache/inductor" TRITON_CACHE_DIR="$cache/triton" timeout "${COLDWARM_S:-240}" \
      python3 benchmarks/first_case.py --device "${COLDWARM_DEVICE:-cuda}" ${COLDWARM_ARGS:-} \
      > "$OUT/coldwarm-$state.json" 2>> "$OUT/coldwarm.log"
    code=$?
    echo "$state: exit $code, the process's wall time $(awk -v a="$began" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s;" \
      "$(cat "$OUT/coldwarm-$state.json")" | tee -a "$OUT/coldwarm.txt"
  done
  rm -rf "$cache"
}

install() {
  unpack_cache
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

triton_step() {  # the triton paths profiled beside their yardsticks, then their tests compiled on the GPU
  local device dir
  device=$(python3 -c 'import torch; print(torch.cuda.get_device_name(0).split()[1].lower())')
  # a profile an earlier call left (carried in .gpu_profile/) is resumed: its rows kept, the rest run
  dir=$(ls -d ".gpu_profile/$device-"* 2>/dev/null | tail -n 1)
  dir=${dir:-".gpu_profile/$device-$(date +%F)"}
  mkdir -p "$dir" "$OUT/gpu_profile"
  python3 -c "import triton, torch; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(0))" | tee "$dir/env.txt"
  # the profile first (the issue's criteria; each triton row checked against dense float64 at n = 2048), then
  # the tests: float32 and bf16 compiled here (float16 is checked on the CPU, under the interpreter)
  timeout "${PROFILE_S:-400}" python3 benchmarks/gpu_profile.py "$dir/triton.json" --set triton --n 16384,65536 --series 32768 \
    --rep 50 --check 2048 --check-impls triton --criteria --resume 2>&1 | grep -v -i warn | tee -a "$dir/triton.txt"
  cp -r "$dir" "$OUT/gpu_profile/"
  timeout "${TESTS_S:-120}" python3 -m pytest -q -p no:cacheprovider tests/test_variants/triton/test_triton.py -k "not float16" 2>&1 |
    tail -n 15 | tee "$dir/tests.txt"
  cp -r "$dir" "$OUT/gpu_profile/"
}

ab_step() {  # `suite ab` of the pr grid on the GPU: side B slowed (benchmarks/slowed.py), then an A/A (AB_KINDS)
  local sides=/tmp/ab-sides kind b plugin limit
  mkdir -p "$sides/a" "$sides/b"  # two folders: both sides run this checkout; only b's holds slowdown.py
  printf 'VARIANT = "%s"\nFACTOR = %s\n' "${AB_VARIANT:-strided}" "${AB_FACTOR:-1.10}" > "$sides/b/slowdown.py"
  for kind in ${AB_KINDS:-slowed aa}; do
    b="$sides/a"; plugin=""
    [ "$kind" = slowed ] && { b="$sides/b"; plugin="--plugin slowed"; }
    limit=${AB_S:-300}  # within AB_UNTIL (epoch seconds) where set: the call's time left for pack
    [ -n "${AB_UNTIL:-}" ] && limit=$(( AB_UNTIL - $(date +%s) < limit ? AB_UNTIL - $(date +%s) : limit ))
    [ "$limit" -ge 60 ] || { echo "ab $kind: not run (${limit} s left before AB_UNTIL)"; continue; }
    timeout "$limit" env PYTHONPATH="$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}" python3 -m suite ab \
      --base-dir "$sides/a" --new-dir "$b" \
      --grid pr --device cuda $plugin --run-id "gpu-ab-$kind" --markdown "$OUT/ab-$kind.md" > "$OUT/ab-$kind.log" 2>&1
    echo "ab $kind: exit $?"; grep -E "^(ab |Cases:|- slower|- faster|error)" "$OUT/ab-$kind.log" | head -n 20
  done
}

step() {
  case $1 in
    install) install ;;
    doctor) python3 -m suite doctor --device cuda 2>&1 | tee "$OUT/doctor.txt" ;;
    tests) timeout 120 python3 -m pytest -q tests/test_variants/impls/test_cuda_paths.py 2>&1 | tail -n 15 ;;
    checks) (set -o pipefail; timeout 240 python3 benchmarks/gpu_checks.py "$OUT/gpu_checks.json" 2>&1 | tee "$OUT/checks.txt") ;;
    triton) triton_step ;;
    ab) ab_step ;;
    tiles) (set -o pipefail; timeout "${TILES_S:-240}" python3 benchmarks/triton_tiles.py "$OUT/triton_tiles.json" 2>&1 |
           grep -v -i warn | tee "$OUT/triton_tiles.txt") ;;
    profile) timeout 240 python3 benchmarks/gpu_profile.py "$OUT/profile.json" --check 4096 --rep 100 2>&1 | grep -v -i warn | tee "$OUT/profile.txt" ;;
    smoke) run_grid "${SMOKE_S:-300}" gpu-smoke --grid smoke --device cuda ;;
    pr) run_grid "${PR_S:-240}" gpu-pr-a --grid pr $PR_ARGS; run_grid "${PR_S:-240}" gpu-pr-b --grid pr $PR_ARGS;
        python3 -m suite compare gpu-pr-a gpu-pr-b 2>&1 | tail -n 25 | tee "$OUT/compare.txt" ;;
    grid) run_grid "${GRID_S:-480}" gpu-grid --grid benchmarks/gpu.toml $GRID_ARGS ;;
    unpack) unpack_cache ;;
    coldwarm) coldwarm ;;
    pack) tar czf "$OUT/results.tgz" results/gpu-* 2>/dev/null; pack_cache; bundle_logs; ls -la "$OUT" ;;
    *) echo "unknown step $1"; return 2 ;;
  esac
}

if [ -d /tmp/site ]; then export PYTHONPATH=/tmp/site; fi  # the carried wheels (install); never the exit status
failed=""
for name in "$@"; do
  log "$name"
  step "$name" || { log "$name failed (exit $?)"; failed="$failed $name"; }
  if [ -d /tmp/site ]; then export PYTHONPATH=/tmp/site; fi
done
[ -z "$failed" ] || { log "failed:$failed"; exit 1; }  # every step still ran: a lease is not wasted on the first
