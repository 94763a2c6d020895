#!/usr/bin/env bash
# Cost of the lazy change counter: N small writes through the library,
# without and with a change-cookie query after each write (issue 4 goal:
# under 5% overhead). Usage: bench/changecount.sh [WRITES]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
N=${1:-200000}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cargo build -q --release --example changecount --manifest-path "$ROOT/Cargo.toml" -p xfskit
truncate -s 1G "$WORK/img"
mkfs.xfs -q -f "$WORK/img"
"$ROOT/target/release/examples/changecount" "$WORK/img" "$N"
xfs_repair -n "$WORK/img" >/dev/null 2>&1 && echo "xfs_repair -n: clean"
