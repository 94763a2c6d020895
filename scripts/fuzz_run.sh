#!/usr/bin/env bash
# Runs the fuzz corpus of scripts/fuzz_corpus.sh: for each case, a copy of
# the base image gets one field fuzzed by xfs_db, then `xfs_repair -n`,
# `xfskit check`, `xfskit extract` and `xfskit bulkstat` run on it. Prints the
# agreement per structure (cases, flagged by xfs_repair -n, flagged by check,
# missed, extra) and writes OUT/results.tsv.
#
# Usage (as root):
#   scripts/fuzz_run.sh OUT [EVERY [FIRST]]    run every EVERY-th case from FIRST (0-based)
#   scripts/fuzz_run.sh OUT table              the table of the last run again
#   XFSKIT=path/to/xfskit   the binary (default: target/release/xfskit, built if missing)
#   JOBS=2                  cases run at once
#   CASES=file              another case list (default OUT/cases.tsv)
#   READERS=0               skip extract and bulkstat (their columns read "-")
# xfs_repair's verdicts are kept in OUT/repair.tsv and reused on later runs.
# results.tsv columns: n feature structure field verb repair check named
#   check_seconds check_rss_kib extract bulkstat first_problem
# (repair/check: 1 flagged, 0 clean, F fuzz refused by xfs_db; extract and
#  bulkstat: exit codes, 124 a timeout; named: 1 when check's report names
#  the fuzzed structure's place)
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${1:?usage: fuzz_run.sh OUT [EVERY [FIRST]]}
EVERY=${2:-1}
FIRST=${3:-0}
JOBS=${JOBS:-2}
CASES=${CASES:-$OUT/cases.tsv}

table() {
# The table: cases, flagged by xfs_repair -n, by check, missed, extra.
awk -F'\t' '
    $6 == "F" { refused++; next }
    {
        s = $3; sub(/:.*/, "", s)
        if (!(s in c)) order[++ns] = s
        c[s]++; tc++
        if ($6 == 1) { r[s]++; tr++ }
        if ($7 != 0) { k[s]++; tk++ }
        if ($6 == 1 && $7 == 0) { m[s]++; tm++ }
        if ($6 == 0 && $7 != 0) { x[s]++; tx++ }
        if ($7 != 0 && $7 != 1) { bad[s]++; tb++ }
    }
    END {
        printf "| structure | cases | xfs_repair -n flags | check flags | missed | extra | check exit not 0/1 |\n"
        printf "|---|---:|---:|---:|---:|---:|---:|\n"
        for (i = 1; i <= ns; i++) { s = order[i]
            printf "| %s | %d | %d | %d | %d | %d | %d |\n", s, c[s], r[s], k[s], m[s], x[s], bad[s] }
        printf "| **all** | %d | %d | %d | %d | %d | %d |\n", tc, tr, tk, tm, tx, tb
        if (refused) printf "(%d cases the fuzz command refused are left out)\n", refused
    }' "$OUT/results.tsv"
}
if [ "$EVERY" = table ]; then table; exit; fi

if [ -z "${XFSKIT:-}" ]; then
    cargo build --release -q -p xfskit-cli
    XFSKIT=$PWD/target/release/xfskit
fi
WORK=$(mktemp -d /dev/shm/xfskit-fuzz.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# a copy, so that rebuilding during a run does not change the binary
cp "$XFSKIT" "$WORK/xfskit"
XFSKIT=$WORK/xfskit
export XFSKIT OUT WORK
touch "$OUT/repair.tsv"

# The tools for a feature's images: xfsprogs 6.15 beside the project for
# pptr and metadir (parent pointers and metadata directory trees, which
# Debian's 6.1 calls corruption).
SHARED615=$(pwd)/../shared/xfsprogs-6.15
export SHARED615
tools_for() {
    if [ "$1" = pptr ] || [ "$1" = metadir ]; then
        local e=(env LD_LIBRARY_PATH="$SHARED615/lib")
        XFS_DB=("${e[@]}" "$SHARED615/libexec/xfs_db")
        XFS_REPAIR=("${e[@]}" "$SHARED615/libexec/xfs_repair")
    else
        XFS_DB=(xfs_db) XFS_REPAIR=(xfs_repair)
    fi
}

# one_case N FEATURE STRUCT CMDS FIELD VERB WHERE: prints one results line
one_case() {
    local n=$1 f=$2 s=$3 cmds=$4 field=$5 verb=$6 where=$7
    local img="$WORK/$n.img" args=() c key repair check named secs rss ext bulk first
    cp --sparse=always "$OUT/base-$f.img" "$img"
    tools_for "$f"
    IFS=';' read -ra cs <<< "$cmds"
    for c in "${cs[@]}"; do args+=(-c "$c"); done
    if ! "${XFS_DB[@]}" -x "${args[@]}" -c "fuzz -d $field $verb" "$img" > "$WORK/$n.db" 2>&1 ||
        ! awk -v k="$field = " 'index($0, k) == 1 {f = 1} END {exit !f}' "$WORK/$n.db"; then
        printf '%s\t%s\t%s\t%s\t%s\tF\tF\t0\t0\t0\t0\t0\t%s\n' "$n" "$f" "$s" "$field" "$verb" \
            "$(head -c 80 "$WORK/$n.db" | tr '\t\n' '  ')"
        rm -f "$img" "$WORK/$n.db"
        return
    fi
    key="$f|$s|$field|$verb"
    repair=$(awk -F'\t' -v k="$key" '$1 == k {print $2; exit}' "$OUT/repair.tsv")
    if [ -z "$repair" ]; then
        if timeout 120 "${XFS_REPAIR[@]}" -n "$img" > /dev/null 2>&1; then repair=0; else repair=1; fi
        printf '%s\t%s\n' "$key" "$repair" >> "$OUT/repair.tsv"
    fi
    check=0
    /usr/bin/time -f '%e %M' -o "$WORK/$n.time" timeout 60 "$XFSKIT" check "$img" \
        > "$WORK/$n.out" 2> "$WORK/$n.err" || check=$?
    read -r secs rss < <(tail -1 "$WORK/$n.time") || { secs=0; rss=0; }
    first=$(grep -v '^checked ' "$WORK/$n.out" | head -1 | cut -c1-160 | tr '\t' ' ')
    [ -n "$first" ] || first=$(head -1 "$WORK/$n.err" | cut -c1-160 | tr '\t' ' ')
    named=0
    grep -qF "$where" "$WORK/$n.out" "$WORK/$n.err" && named=1
    ext=- bulk=-
    if [ "${READERS:-1}" != 0 ]; then
        rm -rf "$WORK/$n.x"
        ext=0
        timeout 60 "$XFSKIT" extract -q "$img" "$WORK/$n.x" > /dev/null 2>&1 || ext=$?
        rm -rf "$WORK/$n.x"
        bulk=0
        timeout 60 "$XFSKIT" bulkstat "$img" > /dev/null 2>&1 || bulk=$?
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$f" "$s" "$field" "$verb" \
        "$repair" "$check" "$named" "$secs" "$rss" "$ext" "$bulk" "$first"
    rm -f "$img" "$WORK/$n".*
}
export -f one_case tools_for

awk -F'\t' -v e="$EVERY" -v s="$FIRST" '(NR - 1) % e == s % e { print NR - 1 "\t" $0 }' "$CASES" |
    xargs -P "$JOBS" -d '\n' -n 1 bash -c 'IFS=$'"'"'\t'"'"' read -r n f s c fl v w <<< "$0"; one_case "$n" "$f" "$s" "$c" "$fl" "$v" "$w"' \
    | sort -n > "$OUT/results.tsv"
table

