# Shell functions shared by the benchmark scripts that compare two builds; sourced, not run.

# The median of the numbers on standard input, one per line.
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# The median of the numbers of a space-separated list.
median_of() { tr ' ' '\n' <<<"$1" | grep . | median; }

# Sets x to what MEASURE A ARGS... prints and y to what MEASURE B ARGS... prints, running A
# first in odd rounds and second in even ones, so that whatever the order of two runs favours
# (a warm page cache, the other process's state) falls on both sides alike.
alternately() { # MEASURE A B ROUND [ARGS...]
    local measure=$1 a=$2 b=$3 round=$4
    shift 4
    if [ $((round % 2)) = 1 ]; then
        x=$("$measure" "$a" "$@"); y=$("$measure" "$b" "$@")
    else
        y=$("$measure" "$b" "$@"); x=$("$measure" "$a" "$@")
    fi
}

# A / B to three decimals.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }

# Runs MEASURE (a function printing one figure for a build) on builds A and B for ROUNDS
# rounds, alternately; prints each round's pair and ratio, then the medians over the rounds
# and the median of the per-round ratios (A / B) with its 95% confidence interval (see
# `median_ci_of`). NAME heads the error of a run that printed no figure. ARGS go to MEASURE
# after the build.
compare_rounds() { # NAME UNIT MEASURE A B ROUNDS [ARGS...]
    local name=$1 unit=$2 measure=$3 a=$4 b=$5 rounds=$6 r sa="" sb="" sr=""
    shift 6
    for r in $(seq "$rounds"); do
        alternately "$measure" "$a" "$b" "$r" "$@"
        [ -n "$x" ] && [ -n "$y" ] || { echo "$name: a run printed no figure" >&2; exit 1; }
        echo "round $r: A $x $unit, B $y $unit, A / B $(ratio "$x" "$y")"
        sa+="$x " sb+="$y " sr+="$(ratio "$x" "$y") "
    done
    echo "median over $rounds rounds: A $(median_of "$sa") $unit, B $(median_of "$sb") $unit; median of the ratios A / B: $(median_ci_of "$sr") (95% interval)"
}

# Runs bsp-bench's superstep measurement with COMMAND (a bsp-bench binary, perhaps behind
# chrt): BSP_PROCS processes (2 when unset), the median of 31 repetitions of 2000 empty
# supersteps and of 2000 8-byte all-reduces, with its figures written to JSON. Prints both in
# microseconds: "SUPERSTEP ALL_REDUCE".
bsp_step_figures() { # JSON COMMAND...
    local json=$1
    shift
    "$@" --procs "${BSP_PROCS:-2}" --no-mpi --supersteps-only --rounds 1 --reps 31 --json "$json" >/dev/null
    local figures=()
    for key in bsp_superstep_us bsp_all_reduce_us; do
        figures+=("$(grep -o "\"$key\": *[0-9.e-]*" "$json" | head -1 | sed 's/.*: *//')")
    done
    echo "${figures[*]}"
}

# The median of the numbers of a space-separated list and a distribution-free 95% confidence
# interval for it, from the order statistics (the binomial interval: ranks n/2 - 0.98 sqrt(n)
# and 1 + n/2 + 0.98 sqrt(n)), as "MEDIAN [LOW, HIGH]". With fewer than 6 numbers the
# interval is the whole range.
median_ci_of() {
    tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{ v[NR] = $1 } END {
        n = NR; h = 0.98 * sqrt(n)
        lo = int(n / 2 - h); if (lo < 1) lo = 1
        hi = 1 + n / 2 + h; hi = (hi == int(hi)) ? hi : int(hi) + 1; if (hi > n) hi = n
        if (n < 6) { lo = 1; hi = n }
        printf "%s [%s, %s]", v[int((n + 1) / 2)], v[lo], v[hi] }'
}
