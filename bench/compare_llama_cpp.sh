#!/usr/bin/env bash
# Side-by-side CPU throughput: `shoal bench` vs llama.cpp's `llama-bench`, same
# model, threads, sizes and depth, in one run, the repeats alternated (shoal,
# llama.cpp, shoal, …) so that a noisy neighbour hits both alike. Prints a
# markdown table (mean ± stddev tok/s; the ratio shoal/llama.cpp of the means,
# the median of the alternated pairs' ratios and the ratio of the best runs),
# the machine and the exact commands.
#
#   bench/compare_llama_cpp.sh -m MODEL [-q TYPE] [-g vulkan] [-t THREADS] [-p N_PROMPT] [-n N_GEN] [-d DEPTH] [-r REPS]
#
# -g vulkan puts every layer on the Vulkan device on both sides (shoal
# --device vulkan, llama-bench -ngl 99); point LLAMA_BENCH at a llama.cpp
# built with -DGGML_VULKAN=ON.
# -q TYPE benchmarks MODEL requantized to TYPE (Q4_0, Q8_0, F16, ...) with
# llama.cpp's quantize tool, written once beside MODEL (outside the repository).
# Builds nothing. Binaries: SHOAL (default build/shoal in this repository),
# LLAMA_BENCH (default ~/.cache/shoal/llama.cpp-build/bin/llama-bench), LLAMA_QUANTIZE
# (default: llama-quantize beside LLAMA_BENCH).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
shoal=${SHOAL:-$root/build/shoal}
llama_bench=${LLAMA_BENCH:-$HOME/.cache/shoal/llama.cpp-build/bin/llama-bench}
llama_quantize=${LLAMA_QUANTIZE:-$(dirname "$llama_bench")/llama-quantize}
model="" quant="" device="" threads=$(nproc) n_prompt=128 n_gen=64 depth=0 reps=3

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts "m:q:g:t:p:n:d:r:h" opt; do
  case $opt in
    m) model=$OPTARG ;; q) quant=$OPTARG ;; g) device=$OPTARG ;; t) threads=$OPTARG ;; p) n_prompt=$OPTARG ;;
    n) n_gen=$OPTARG ;; d) depth=$OPTARG ;; r) reps=$OPTARG ;; *) usage ;;
  esac
done
[[ -n $model ]] || usage
[[ -f $model ]] || { echo "error: model not found: $model" >&2; exit 1; }
[[ -x $shoal ]] || { echo "error: shoal binary not found: $shoal (run scripts/build, or set SHOAL)" >&2; exit 1; }
[[ -x $llama_bench ]] || { echo "error: llama-bench not found: $llama_bench (build llama.cpp, see docs/benchmarks.md, or set LLAMA_BENCH)" >&2; exit 1; }
if [[ -n $quant ]]; then
  requantized=${model%.gguf}.$quant.gguf
  if [[ ! -f $requantized ]]; then
    [[ -x $llama_quantize ]] || { echo "error: llama-quantize not found: $llama_quantize (or set LLAMA_QUANTIZE)" >&2; exit 1; }
    "$llama_quantize" --allow-requantize "$model" "$requantized.part" "$quant" >/dev/null 2>&1 ||
      { echo "error: llama-quantize could not make $quant from $model" >&2; rm -f "$requantized.part"; exit 1; }
    mv "$requantized.part" "$requantized"
    echo "requantized: $llama_quantize --allow-requantize $model $requantized $quant" >&2
  fi
  model=$requantized
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(-m "$model" -t "$threads" -p "$n_prompt" -n "$n_gen" -d "$depth" -r 1 -o json)
shoal_args=() llama_args=()
if [[ -n $device ]]; then
  [[ $device == vulkan* ]] || { echo "error: -g takes vulkan or vulkan:N" >&2; exit 1; }
  shoal_args=(--device "$device") llama_args=(-ngl 99)
fi
run() {  # run NAME REP BINARY [ARGS...]: JSON to $tmp/NAME.REP.json, stderr to $tmp/NAME.log
  local name=$1 rep=$2; shift 2
  "$@" >"$tmp/$name.$rep.json" 2>"$tmp/$name.log" || { echo "error: $name failed:" >&2; cat "$tmp/$name.log" >&2; exit 1; }
}
load=$(cut -d" " -f1-3 /proc/loadavg)
for rep in $(seq 1 "$reps"); do
  run shoal "$rep" "$shoal" bench "${args[@]}" "${shoal_args[@]}"
  run llama.cpp "$rep" "$llama_bench" "${args[@]}" "${llama_args[@]}"
done

machine=$(lscpu | awk -F': *' '/^Model name/ {m=$2} /^Core\(s\) per socket/ {c=$2} /^Socket\(s\)/ {s=$2}
  /^Hypervisor vendor/ {h=", " $2 " guest"} END {print m ", " c * s " cores" h}')
echo "Machine: $machine; load average before the run: $load"
echo
python3 - "$tmp" "$(basename "$model")" "$threads" "$reps" <<'EOF_PY'
import glob, json, statistics, sys
tmp, model, threads, reps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

def key(r):
    test = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
    return test + (f" @ d{r['n_depth']}" if r.get("n_depth") else "")

def samples(name):
    """test -> {repeat: tok/s} (each run is -r 1)."""
    out, commit = {}, ""
    for path in glob.glob(f"{tmp}/{name}.*.json"):
        rep = int(path.rsplit(".", 2)[-2])
        for r in json.load(open(path)):
            out.setdefault(key(r), {})[rep] = statistics.mean(r["samples_ts"])
            commit = r.get("build_commit", "")
    return out, commit

shoal, _ = samples("shoal")
llama, commit = samples("llama.cpp")
fmt = lambda v: f"{statistics.mean(v):.1f} ± {statistics.stdev(v) if len(v) > 1 else 0:.1f}"
# Three ratios: of the means; the median of each alternated pair's ratio (a
# slow spell hits both runs of a pair alike); of the best runs (noise only
# ever slows a run down).
print("| model | threads | test | shoal t/s | llama.cpp t/s | ratio of means | median paired ratio | ratio of bests |")
print("| ----- | ------: | ---- | --------: | ------------: | -------------: | ------------------: | -------------: |")
for test, s in shoal.items():
    l = llama[test]
    sv, lv = list(s.values()), list(l.values())
    paired = statistics.median(s[r] / l[r] for r in s if r in l)
    print(f"| {model} | {threads} | {test} | {fmt(sv)} | {fmt(lv)} | {statistics.mean(sv) / statistics.mean(lv):.2f} "
          f"| {paired:.2f} | {max(sv) / max(lv):.2f} |")
print(f"\nllama.cpp build: commit {commit}; {reps} repeats each, alternated")
EOF_PY
echo
echo "Commands (each repeated $reps times, alternated):"
echo "    $shoal bench ${args[*]} ${shoal_args[*]}"
echo "    $llama_bench ${args[*]} ${llama_args[*]}"
