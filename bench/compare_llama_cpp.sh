#!/usr/bin/env bash
# Side-by-side CPU throughput: `shoal bench` vs llama.cpp's `llama-bench`, same
# model, threads and sizes, in one run. Prints a markdown table (mean ± stddev
# tok/s and the ratio shoal/llama.cpp), the machine and the exact commands.
#
#   bench/compare_llama_cpp.sh -m MODEL [-t THREADS] [-p N_PROMPT] [-n N_GEN] [-r REPS]
#
# Builds nothing. Binaries: SHOAL (default build/shoal in this repository),
# LLAMA_BENCH (default ~/.cache/shoal/llama.cpp-build/bin/llama-bench).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
shoal=${SHOAL:-$root/build/shoal}
llama_bench=${LLAMA_BENCH:-$HOME/.cache/shoal/llama.cpp-build/bin/llama-bench}
model="" threads=$(nproc) n_prompt=128 n_gen=64 reps=3

usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts "m:t:p:n:r:h" opt; do
  case $opt in
    m) model=$OPTARG ;; t) threads=$OPTARG ;; p) n_prompt=$OPTARG ;;
    n) n_gen=$OPTARG ;; r) reps=$OPTARG ;; *) usage ;;
  esac
done
[[ -n $model ]] || usage
[[ -f $model ]] || { echo "error: model not found: $model" >&2; exit 1; }
[[ -x $shoal ]] || { echo "error: shoal binary not found: $shoal (run scripts/build, or set SHOAL)" >&2; exit 1; }
[[ -x $llama_bench ]] || { echo "error: llama-bench not found: $llama_bench (build llama.cpp, see docs/benchmarks.md, or set LLAMA_BENCH)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(-m "$model" -t "$threads" -p "$n_prompt" -n "$n_gen" -r "$reps" -o json)
run() {  # run NAME BINARY [ARGS...]: JSON to $tmp/NAME.json, stderr to $tmp/NAME.log
  local name=$1; shift
  "$@" >"$tmp/$name.json" 2>"$tmp/$name.log" || { echo "error: $name failed:" >&2; cat "$tmp/$name.log" >&2; exit 1; }
}
load=$(cut -d" " -f1-3 /proc/loadavg)
run shoal "$shoal" bench "${args[@]}"
run llama.cpp "$llama_bench" "${args[@]}"

machine=$(lscpu | awk -F': *' '/^Model name/ {m=$2} /^Core\(s\) per socket/ {c=$2} /^Socket\(s\)/ {s=$2}
  /^Hypervisor vendor/ {h=", " $2 " guest"} END {print m ", " c * s " cores" h}')
echo "Machine: $machine; load average before the run: $load"
echo
python3 - "$tmp/shoal.json" "$tmp/llama.cpp.json" "$(basename "$model")" "$threads" <<'EOF'
import json, sys
shoal, llama = (json.load(open(p)) for p in sys.argv[1:3])
key = lambda r: f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
llama = {key(r): r for r in llama}
print("| model | threads | test | shoal t/s | llama.cpp t/s | shoal / llama.cpp |")
print("| ----- | ------: | ---- | --------: | ------------: | ----------------: |")
for r in shoal:
    l = llama[key(r)]
    print(f"| {sys.argv[3]} | {sys.argv[4]} | {key(r)} | {r['avg_ts']:.1f} ± {r['stddev_ts']:.1f} "
          f"| {l['avg_ts']:.1f} ± {l['stddev_ts']:.1f} | {r['avg_ts'] / l['avg_ts']:.2f} |")
print(f"\nllama.cpp build: commit {next(iter(llama.values()))['build_commit']}")
EOF
echo
echo "Commands:"
echo "    $shoal bench ${args[*]}"
echo "    $llama_bench ${args[*]}"
