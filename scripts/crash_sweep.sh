#!/usr/bin/env bash
# The long crash sweeps, by hand or nightly (CI runs a sample of them in
# scripts/test.sh): random workloads crashed at random writes over many
# seeds, on 6.1-default filesystems and on filesystems with parent
# pointers, each crash recovered by the kernel and by xfskit and checked
# with xfs_repair -n. As root (the kernel's recovery is a loop mount).
#
# Usage: scripts/crash_sweep.sh [LAST_SEED [FIRST_SEED]]
#   LAST_SEED   last seed of the plain sweep (default 500; CI runs 25)
#   FIRST_SEED  first seed (default 1)
# Env: PPTR_SEEDS  last seed of the parent-pointer sweep (default LAST_SEED / 2;
#                  CI runs 12)
set -euo pipefail
cd "$(dirname "$0")/.."
last=${1:-500}
first=${2:-1}
pptr=${PPTR_SEEDS:-$((last / 2))}
[ "$(id -u)" = 0 ] || { echo "crash_sweep.sh: needs root (loop mounts)" >&2; exit 2; }
export XFSKIT_CRASH_SEEDS=$last XFSKIT_CRASH_FIRST=$first XFSKIT_CRASH_PPTR_SEEDS=$pptr
cargo test -p xfskit --test journal_crash -- --nocapture --test-threads=2 \
    random_workloads_crashed_at_random_writes \
    random_workloads_with_parent_pointers_crashed_at_random_writes
