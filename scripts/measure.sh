# Shell functions shared by the benchmark scripts that compare two builds; sourced, not run.

# The median of the numbers on standard input, one per line.
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# A / B to three decimals.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }

# Runs bsp-bench's superstep measurement with COMMAND (a bsp-bench binary, perhaps behind
# chrt): 2 processes, the median of 31 repetitions of 2000 empty supersteps and of 2000 8-byte
# all-reduces, with its figures written to JSON. Prints both in microseconds:
# "SUPERSTEP ALL_REDUCE".
bsp_step_figures() { # JSON COMMAND...
    local json=$1
    shift
    "$@" --procs 2 --no-mpi --supersteps-only --rounds 1 --reps 31 --json "$json" >/dev/null
    local figures=()
    for key in bsp_superstep_us bsp_all_reduce_us; do
        figures+=("$(grep -o "\"$key\": *[0-9.e-]*" "$json" | head -1 | sed 's/.*: *//')")
    done
    echo "${figures[*]}"
}
