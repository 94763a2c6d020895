#!/usr/bin/env bash
# The offline fuzz-repair sweep of fstests' xfs/35x-4xx tests, run on xfskit:
# for each field of each target structure and each deterministic fuzz verb of
# xfs_db (zeroes ones firstbit middlebit lastbit add sub), on a copy of an image
# made by mkfs.xfs 7.2 and populated by xfskit: fuzz with xfs_db; `xfskit check`
# must flag it (else the case is counted as "not detected" when xfs_repair -n
# flags it, or "no-op" when neither does); `xfskit repair`; then `xfskit check`
# and `xfs_repair -n` 7.2 must both be clean. xfs_repair runs on the same
# damaged copy and the files each leaves reachable (outside lost+found) and in
# lost+found are counted.
#
# Usage: scripts/repair-sweep.sh [TARGETS...]
#   targets: file-core dir-core sfdir blockdir agf agi sb sb0 (sb: the secondary
#   of AG 1, sb0: the primary; default: all but sb and sb0)
# Environment: XFSPROGS (default ../shared/xfsprogs-7.2/bin), XFSKIT (default
#   target/debug/xfskit), OUT (default /tmp/repair-sweep), VERBS, MAXFIELDS.
# Prints one line per case and a summary; exits 1 if any case failed.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
B=${XFSPROGS:-$here/../shared/xfsprogs-7.2/bin}
X=${XFSKIT:-$here/target/debug/xfskit}
OUT=${OUT:-/tmp/repair-sweep}
VERBS=${VERBS:-"zeroes ones firstbit middlebit lastbit add sub"}
MAXFIELDS=${MAXFIELDS:-1000}
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(file-core dir-core sfdir blockdir agf agi)
mkdir -p "$OUT"
base=$OUT/base.img
src=$OUT/src
rm -rf "$src" && mkdir -p "$src/s/d1/d2" "$src/s/big"
echo hi > "$src/s/d1/f1"; echo yo > "$src/s/d1/d2/f2"; seq 1 5000 > "$src/s/top"
for i in $(seq 1 40); do echo "$i" > "$src/s/big/file$i"; done
rm -f "$base" && truncate -s 320m "$base" && "$B/mkfs.xfs" -q -f "$base" && "$X" cp -r "$src/s" "$base:/s" || exit 2
ino() { "$X" stat "$base" "$1" | awk '/ino:/{print $2}'; }
f1=$(ino /s/d1/f1); d1=$(ino /s/d1); big=$(ino /s/big); top=$(ino /s/top)
# Address commands of each target, and the field prefix to fuzz.
addr() {
  case $1 in
    file-core) echo "-c 'inode $top'|core.";;
    dir-core) echo "-c 'inode $d1'|core.";;
    sfdir) echo "-c 'inode $d1'|u3.sfdir3.";;
    blockdir) echo "-c 'inode $big' -c 'dblock 0'|";;
    agf) echo "-c 'agf 1'|";;
    agi) echo "-c 'agi 1'|";;
    sb) echo "-c 'sb 1'|";;
    sb0) echo "-c 'sb 0'|";;
  esac
}
# Files reachable outside lost+found, and inside it.
count() {
  local all lf
  all=$("$X" ls -R "$1" / 2>/dev/null | grep -vc -e '^$' -e ':$')
  lf=$("$X" ls -R "$1" /lost+found 2>/dev/null | grep -vc -e '^$' -e ':$')
  # lost+found itself is not a file kept.
  if "$X" stat "$1" /lost+found >/dev/null 2>&1; then all=$((all - 1)); fi
  echo "$((all - lf)) $lf"
}
pass=0; fail=0; undetected=0; noop=0; fewer=0
for t in "${targets[@]}"; do
  a=$(addr "$t"); cmds=${a%%|*}; prefix=${a#*|}
  fields=$(eval "$B/xfs_db" -r $cmds -c print "$base" 2>/dev/null | awk -F' = ' 'NF > 1 {print $1}' \
           | grep "^${prefix//./\\.}" | grep -v -e crc -e '\.name$' | head -n "$MAXFIELDS")
  for f in $fields; do
    for v in $VERBS; do
      img=$OUT/case.img; theirs=$OUT/theirs.img
      cp --sparse=always "$base" "$img"
      eval "$B/xfs_db" -x $cmds -c "'fuzz -d $f $v'" "$img" >/dev/null 2>&1
      cp --sparse=always "$img" "$theirs"
      name="$t $f $v"
      if "$X" check "$img" >/dev/null 2>&1; then
        if "$B/xfs_repair" -n "$img" >/dev/null 2>&1; then noop=$((noop + 1)); continue; fi
        echo "NOT DETECTED: $name"; undetected=$((undetected + 1)); continue
      fi
      timeout 300 "$X" repair "$img" > "$OUT/repair.out" 2>&1
      rc=$?
      ok=1
      "$X" check "$img" >/dev/null 2>&1 || ok=0
      "$B/xfs_repair" -n "$img" >/dev/null 2>&1 || ok=0
      timeout 300 "$B/xfs_repair" "$theirs" >/dev/null 2>&1
      theirs_ok=$?
      "$B/xfs_repair" -n "$theirs" >/dev/null 2>&1 || theirs_ok=1
      read -r ours_in ours_lf < <(count "$img")
      read -r their_in their_lf < <(count "$theirs")
      kept="kept $ours_in+$ours_lf, xfs_repair $their_in+$their_lf"
      if [ $ok = 1 ]; then
        pass=$((pass + 1))
        if [ $((ours_in + ours_lf)) -lt $((their_in + their_lf)) ]; then
          fewer=$((fewer + 1)); echo "FEWER: $name: $kept"
        else
          echo "ok: $name: $kept"
        fi
      else
        fail=$((fail + 1))
        echo "FAIL: $name (repair exit $rc, xfs_repair's result clean: $([ $theirs_ok = 0 ] && echo yes || echo no)): $kept"
        sed 's/^/    /' "$OUT/repair.out" | head -12
      fi
    done
  done
done
echo "summary: repaired clean $pass, not clean $fail, kept fewer files than xfs_repair $fewer, not detected by check $undetected, no-op fuzz $noop"
[ $fail = 0 ]
