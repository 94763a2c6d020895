#!/usr/bin/env bash
# The main job on a built-in example: build an XFS image from the directory
# examples/tree with `xfskit build` (no root, no loop device), verify it
# with xfs_repair -n and `xfskit check`, read it back with xfskit (ls,
# extract) and compare with the source. As root, the kernel also mounts the
# image and must show the same tree.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v mkfs.xfs >/dev/null && command -v zstd >/dev/null || {
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq xfsprogs zstd attr >/dev/null; fi
}
cargo build -q --release -p xfskit-cli
x=target/release/xfskit
work=$(mktemp -d)
cleanup() { umount "$work/mnt" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
img=$work/demo.img

# xfskit makes today's mkfs.xfs defaults (parent pointers, exchange-range),
# which Debian's xfs_repair 6.1 predates: xfsprogs 6.15 beside the project
# checks them; without it the example is built with xfsprogs 6.1's defaults.
repair=(xfs_repair)
defaults=(--defaults 6.1)
x615=../shared/xfsprogs-6.15
if [ -x "$x615/libexec/xfs_repair" ]; then
  if [ "$(id -u)" = 0 ] && ! LD_LIBRARY_PATH="$x615/lib" "$x615/libexec/xfs_repair" -V >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq liburcu8 libinih1 >/dev/null 2>&1 || true
  fi
  if LD_LIBRARY_PATH="$x615/lib" "$x615/libexec/xfs_repair" -V >/dev/null 2>&1; then
    repair=(env LD_LIBRARY_PATH="$x615/lib" "$x615/libexec/xfs_repair")
    defaults=()
  fi
fi
echo "== xfskit build ${defaults[*]} examples/tree $img"
$x build "${defaults[@]}" examples/tree "$img"
echo "== xfs_repair -n ($("${repair[@]}" -V))"
"${repair[@]}" -n "$img" >/dev/null 2>&1 && echo "xfs_repair -n: clean"
echo "== xfskit check"
$x check "$img"
echo "== xfskit ls -lR"
$x ls -lR "$img" /
echo "== xfskit extract and compare with the source"
$x extract "$img" "$work/out"
diff -r --no-dereference examples/tree "$work/out" && echo "extracted tree equals examples/tree"
if [ "$(id -u)" = 0 ]; then
  echo "== the kernel mounts the image and sees the same tree"
  mkdir -p "$work/mnt"
  mount -o loop,ro "$img" "$work/mnt"
  diff -r --no-dereference examples/tree "$work/mnt" && echo "kernel view equals examples/tree"
  umount "$work/mnt"
else
  echo "(not root: skipping the kernel mount comparison)"
fi
