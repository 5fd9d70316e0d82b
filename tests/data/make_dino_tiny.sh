#!/bin/sh
# tests/data/make_dino_tiny.sh - tests/data/dino_tiny.h5 can be remade: make_dino_tiny.py, run on the
# upstream DINO sources named by SCDINO_DINO_SRC (a checkout of https://github.com/facebookresearch/dino,
# commit 7c446df5b9f45747937fb0d72314eb9f7b66930a) with the stored weights and crops
# (--inputs-from), must give every dataset and attribute of the stored file (compare_h5.py: relative
# error <= 1e-6, the rest equal).  Skipped without SCDINO_DINO_SRC, Python 3, PyTorch or h5py.
. "$top_srcdir/tests/lib.sh"
[ -n "$SCDINO_DINO_SRC" ] ||
  skip "SCDINO_DINO_SRC is not set (a checkout of https://github.com/facebookresearch/dino," \
    "commit 7c446df5b9f4, to regenerate dino_tiny.h5 from)"
[ "$PYTHON3" != none ] || skip "no Python 3 (configure found none)"
case $SCDINO_DINO_SRC in
  /*) src=$SCDINO_DINO_SRC ;;
  *) src=$PWD/$SCDINO_DINO_SRC ;;
esac
ref="$top_srcdir/tests/data/dino_tiny.h5"
gen="$top_srcdir/tests/data/make_dino_tiny.py"
cmp="$top_srcdir/tests/data/compare_h5.py"
# The reference is reproducible bit for bit only by the PyTorch and CPU kernels that made it.
torch_env=$("$PYTHON3" -c 'import torch
cap = [l.split(":", 1)[1].strip() for l in torch.__config__.show().splitlines()
       if "CPU capability usage" in l]
print(torch.__version__, cap[0] if cap else "unknown")' 2>/dev/null) || torch_env=
case $torch_env in
  "") ;; # no PyTorch: make_dino_tiny.py says so and skips
  "1.13."*" AVX2") ;;
  *) skip "PyTorch $torch_env (version, CPU kernels): dino_tiny.h5 is the output of PyTorch 1.13.1" \
    "with its AVX2 kernels" ;;
esac
scratch make_dino_tiny

out=$("$PYTHON3" "$gen" --inputs-from "$ref" "$src" dino_tiny.h5 2>&1 </dev/null); rc=$?
printf '%s\n' "$out"
[ "$rc" = 77 ] && skip "make_dino_tiny.py cannot run here (message above)"
nchecks=$((nchecks + 1))
if [ "$rc" != 0 ]; then
  fail "make_dino_tiny.py exit status $rc"
elif [ ! -f dino_tiny.h5 ]; then
  fail "make_dino_tiny.py wrote no dino_tiny.h5"
else
  for t in .dino_tiny.h5.*.tmp; do [ -e "$t" ] && fail "temporary file $t left behind"; done
  expect_exit 0 "$PYTHON3" "$cmp" dino_tiny.h5 "$ref"
  printf '%s\n' "$out"
  expect_grep '^[0-9]+ datasets compared, 0 groups and datasets only in one file, 0 problems$'
  # An existing file is not replaced without --force.
  expect_exit 1 "$PYTHON3" "$gen" --inputs-from "$ref" "$src" dino_tiny.h5
  expect_grep 'exists; pass --force'
fi
# Without the sources the generator skips (77) with a message.
expect_exit 77 "$PYTHON3" "$gen" "$PWD/no-such-dir" none.h5
expect_grep 'skipped: upstream DINO sources not found'
finish
