#!/bin/sh
# tests/tree/layers.sh - the tree's folders are its layers (doc/architecture.md): a file of src/ or
# cuda/ includes only headers of its own layer or of lower ones (core < input < data < model <
# cpu, cuda < backend < train < analysis < linear < workflow < the program in src/), and never the
# other backend's; above src/backend no file includes a header of cuda/, tests HAVE_CUDA / HAVE_NCCL or
# compares a backend's name (the layers there see a backend only as the struct device of
# backend/device.h); in cuda/, the folders cuda/data, cuda/comm, cuda/analysis include only cuda/
# and cuda/ops below them; no include climbs a directory ("../"); no source folder holds more than
# 30 files; no C, CUDA or shell source file is over 800 lines; no C function of src/ is over 150
# lines.
. "$top_srcdir/tests/lib.sh"
scratch tree_layers
cd "$top_srcdir" || exit 99
# layer rank of a folder (cpu and cuda share one: the two backends)
rank() {
  case $1 in
    src/core) echo 0 ;; src/input) echo 1 ;; src/data) echo 2 ;; src/model) echo 3 ;;
    src/cpu | cuda | cuda/*) echo 4 ;; src/backend) echo 5 ;; src/train) echo 6 ;; src/analysis) echo 7 ;;
    src/linear) echo 8 ;; src/workflow) echo 9 ;; src) echo 10 ;; *) echo 11 ;;
  esac
}
# inside cuda/: its shared headers (cuda/), the op tables (cuda/ops), then the folders of the
# layers it also serves (cuda/data, cuda/comm, cuda/analysis), which include only those below them
cuda_rank() {
  case $1 in cuda) echo 0 ;; cuda/ops) echo 1 ;; *) echo 2 ;; esac
}
backend_of() {
  case $1 in cuda | cuda/*) echo cuda ;; *) echo "$1" ;; esac
}
# the folder of an include written from the root: "data/shards.h" is src/data, "cuda/x.h" is cuda
inc_dir() {
  case $1 in
    cuda/* | bench/* | tests/* | examples/*) dirname "$1" ;;
    */*) echo "src/$(dirname "$1")" ;;
    *) echo src ;;
  esac
}
srcs=$(find src cuda -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.def' \) | sort)
nfiles=0
for f in $srcs; do
  nfiles=$((nfiles + 1))
  d=$(dirname "$f")
  r=$(rank "$d")
  for inc in $(sed -n 's/^[ \t]*#[ \t]*include[ \t]*"\([^"]*\)".*/\1/p' "$f"); do
    [ "$inc" = build_config.h ] && continue
    nchecks=$((nchecks + 1))
    case $inc in
      *../*) fail "$f includes \"$inc\": includes are written from the root, never with ../"; continue ;;
    esac
    idir=$(inc_dir "$inc")
    ir=$(rank "$idir")
    if [ "$r" -gt 5 ] && [ "$r" -lt 11 ] && [ "${idir%%/*}" = cuda ]; then
      fail "$f includes \"$inc\": above src/backend a backend is seen only through struct device (backend/device.h)"
    elif [ "$ir" -gt "$r" ]; then
      fail "$f ($d, layer $r) includes \"$inc\" ($idir, layer $ir): a lower layer never includes a higher one"
    elif [ "$ir" = "$r" ] && [ "$(backend_of "$idir")" != "$(backend_of "$d")" ]; then
      fail "$f includes \"$inc\": $d and $idir are two backends of one layer"
    elif [ "$ir" = "$r" ] && [ "$idir" != "$d" ] && [ "$(cuda_rank "$idir")" -ge "$(cuda_rank "$d")" ]; then
      fail "$f includes \"$inc\": in cuda/, $d includes only its own headers and those of cuda/ and cuda/ops/ below it"
    fi
    [ -f "$inc" ] || [ -f "src/$inc" ] || fail "$f includes \"$inc\", which is no file of the tree"
  done
done
[ "$nfiles" -gt 100 ] || fail "only $nfiles source files found under src/ and cuda/"
# Above src/backend nothing depends on how the build was configured for the backends: the device
# says what it offers (a service that is NULL where a backend lacks it).
for f in $(find src/train src/analysis src/linear src/workflow src -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' \) | sort -u); do
  nchecks=$((nchecks + 1))
  ! grep -n 'HAVE_CUDA\|HAVE_NCCL' "$f" >/dev/null ||
    fail "$f tests $(grep -o 'HAVE_CUDA\|HAVE_NCCL' "$f" | head -1): above src/backend ask the device (backend/device.h) what it offers"
  nchecks=$((nchecks + 1))
  ! grep -nE 'strn?cmp\([^;]*"(cpu|cuda|nccl|mpi)(-shard)?"' "$f" >/dev/null ||
    fail "$f compares a backend's or communicator's name: above src/backend ask the device (backend/device.h)"
done
# Folder sizes and file lengths.
for d in $(find src cuda bench tests examples -type d | grep -v -e '/corpus' -e 'tests/decks' -e '/gen'); do
  n=$(find "$d" -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cc' -o -name '*.sh' \) | wc -l)
  nchecks=$((nchecks + 1))
  [ "$n" -le 30 ] || fail "$d holds $n source files: group them by layer or concept"
done
for f in $(find src cuda bench tests examples -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cc' -o -name '*.sh' \) | grep -v -e '/gen/'); do
  n=$(wc -l <"$f")
  nchecks=$((nchecks + 1))
  [ "$n" -le 800 ] || fail "$f has $n lines: split it by concept (at most 800)"
done
# Function lengths, by this tree's formatting: a function starts at a line that begins in column 0
# with a name and '(' (its signature, which may go on over indented lines) and whose last line
# opens the body with '{'; its body ends at the next line that is exactly '}'.  A '}' line outside
# every function is reported too: the heuristic would have lost track there.
funcs=$(find src -type f \( -name '*.c' -o -name '*.h' \) | sort | xargs awk '
  function fname(s) {
    sub(/[ \t]*\/\*.*/, "", s)
    while (match(s, /^[A-Z_]+(\([^)]*\))?[ \t]+/)) s = substr(s, RLENGTH + 1) # SCD_PRINTF(2, 3) static ...
    if (match(s, /[A-Za-z_0-9]+\([A-Za-z_0-9]+\)\(/)) return substr(s, RSTART, RLENGTH - 1) # KN(name)(...)
    sub(/\(.*/, "", s)
    sub(/.*[ \t*]/, "", s)
    return s
  }
  FNR == 1 { st = 0 }
  st == 1 && /^}$/ { print FILENAME, name, FNR - start + 1; st = 0; next }
  st == 1 { next }
  /^}$/ { print FILENAME, "?", "stray" FNR }
  st == 2 && /^[ \t]/ && /\{[ \t]*$/ { st = 1; next }
  st == 2 && (/^[^ \t]/ || /;[ \t]*$/) { st = 0 }
  st == 0 && /^[A-Za-z_][^=;]*\(/ && !/;/ { start = FNR; name = fname($0); st = /\{[ \t]*$/ ? 1 : 2 }')
nfuncs=0
while read -r f fn len; do
  [ -n "$f" ] || continue
  nfuncs=$((nfuncs + 1))
  case $len in
    stray*) fail "$f line ${len#stray}: a '}' line outside any function found (fix the heuristic above)" ;;
    *) [ "$len" -le 150 ] || fail "$f: function $fn is $len lines long: split it into named steps (at most 150)" ;;
  esac
done <<EOF_FUNCS
$funcs
EOF_FUNCS
nchecks=$((nchecks + nfuncs))
[ "$nfuncs" -gt 500 ] || fail "only $nfuncs functions found in src/: the function-length heuristic lost track"
echo "$nfiles files of src/ and cuda/ checked, $nfuncs functions of src/"
finish
