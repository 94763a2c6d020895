#!/usr/bin/env bash
# Runs the fuzz target. `run.sh short` is the CI run (60 s); `run.sh` alone
# runs until interrupted. Needs cargo-fuzz (installed here when missing) and
# a nightly toolchain, or stable with RUSTC_BOOTSTRAP=1.
set -euo pipefail
cd "$(dirname "$0")"
secs=0
[ "${1:-}" = short ] && secs=${FUZZ_SECONDS:-60}

if ! command -v cargo-fuzz >/dev/null && [ ! -x /tmp/cargo-fuzz/bin/cargo-fuzz ]; then
  echo "fuzz: installing cargo-fuzz"
  cargo install -q cargo-fuzz --root /tmp/cargo-fuzz
fi
export PATH="/tmp/cargo-fuzz/bin:$PATH"
toolchain=()
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  toolchain=(+nightly)
else
  export RUSTC_BOOTSTRAP=1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
zstd -q -d --long=27 ../testdata/fixtures/d_sect4k_ino2k.img.zst -o "$work/base.img"
export XFSKIT_FUZZ_IMAGE="$work/base.img"
mkdir -p "$work/corpus"
# Seeds: a few patches of each kind.
printf '\x00\x00\x10\x00\xff' > "$work/corpus/sb"
printf '\x04\x00\x40\x00\x00\x05\x00\x60\x00\x07' > "$work/corpus/inode"
printf '\x09\x00\x80\x00\x41' > "$work/corpus/block"

args=(-rss_limit_mb=3072 -timeout=20)
[ "$secs" -gt 0 ] && args+=(-max_total_time="$secs")
echo "fuzz: running target 'image' ${secs:+for ${secs}s}"
set +e
cargo "${toolchain[@]}" fuzz run --release image "$work/corpus" -- "${args[@]}" > "$work/fuzz.log" 2>&1
status=$?
set -e
tail -n 15 "$work/fuzz.log"
if [ "$status" -eq 0 ]; then
  echo "fuzz: 1 passed, 0 failed"
else
  echo "fuzz: 0 passed, 1 failed"
fi
exit "$status"
