#!/bin/sh
# tests/faults/train_durable.sh - checkpoints survive what can happen while they are written: kill -9 in the
# middle of a write (&debug checkpoint_pause) leaves the last good checkpoint, and the restart
# removes the leftover and ends bit-identical to an uninterrupted run; a full file system (ulimit -f
# on one rank; a small tmpfs on two, where mounting one is allowed) fails the write with a message
# naming the file and errno, the old checkpoint intact, no temporary left; a checkpoint.h5 that cannot be read (or is missing) falls back to checkpoint.prev.h5 with a
# warning; both unreadable is refused; a checkpoint of another model or channel count is refused
# naming the key.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
. "$top_srcdir/tests/faults/fault_lib.sh"
scratch train_durable
train_data shards

# One rank, batch 4: 10 iterations per epoch, 20 steps.
train_deck full epochs=2 batch_size_per_rank=4 >full.nml
bounded 0 "$SCDINO" full.nml

# finish_run NAME EPOCH ITERATION [FROM]: restart NAME to the end from FROM (default its
# checkpoint.h5) at (EPOCH, ITERATION); the result must equal the uninterrupted run.
finish_run() {
  train_deck "$1" epochs=2 batch_size_per_rank=4 restart=.true. >"$1-end.nml"
  bounded 0 "$SCDINO" "$1-end.nml"
  expect_grep "restart: continuing from ${4:-$1/checkpoint.h5} at epoch $2, iteration $3 "
  ckpt_same full/checkpoint.h5 "$1/checkpoint.h5"
  same_log full/log.txt "$1/log.txt"
  no_tmp "$1"
}

# ---- kill -9 during a checkpoint write ----
train_deck k epochs=2 batch_size_per_rank=4 max_steps=3 >k1.nml
bounded 0 "$SCDINO" k1.nml
cp k/checkpoint.h5 k-good.h5 || exit 99
debug_deck k "checkpoint_pause = 60" epochs=2 batch_size_per_rank=4 max_steps=2 restart=.true. >k2.nml
bg_start k2.out "$SCDINO" k2.nml
wait_for k2.out "debug: checkpoint write paused for 60 s with half of k/checkpoint\.h5\.tmp\.[0-9]+ written" 300 ||
  fail "k: the checkpoint write did not pause"
nchecks=$((nchecks + 1))
ls k | grep -q '^checkpoint\.h5\.tmp\.[0-9]*$' || fail "k: no temporary checkpoint while writing"
kill -9 "$bg"
bg_finish
[ "$rc" = 137 ] || fail "k: exit status $rc after kill -9"
nchecks=$((nchecks + 1))
cmp -s k/checkpoint.h5 k-good.h5 || fail "k: kill -9 during the write changed checkpoint.h5"
finish_run k 0 3
expect_grep "warning: removed k/checkpoint\.h5\.tmp\.[0-9]+, an unfinished file of an earlier run that was killed while writing it"

# ---- a full file system: a file-size limit (ulimit -f) below a checkpoint's size ----
# The limit is set for the rank only: under it Open MPI's own start-up files (PMIx, shared memory)
# fail, so a singleton or mpirun itself cannot run with it.
if [ "$MPIEXEC" != none ]; then
train_deck f epochs=2 batch_size_per_rank=4 max_steps=3 >f1.nml
bounded 0 "$SCDINO" f1.nml
cp f/checkpoint.h5 f-good.h5 || exit 99
train_deck f epochs=2 batch_size_per_rank=4 max_steps=2 restart=.true. >f2.nml
blocks=$(($(wc -c <f-good.h5) / 1024)) # 512-byte blocks: half a checkpoint
bounded 1 $MPIEXEC -n 1 sh -c "ulimit -f $blocks && exec \"\$0\" f2.nml" "$SCDINO"
expect_grep "error: cannot write checkpoint f/checkpoint\.h5\.tmp\.[0-9]+: errno 27: File too large \(after [0-9]+ of [0-9]+ bytes\) - disk full, quota or file-size limit\?  The temporary file is removed; f/checkpoint\.h5 is left as it was \(the last good checkpoint\)"
nchecks=$((nchecks + 1))
cmp -s f/checkpoint.h5 f-good.h5 || fail "f: the failed write changed checkpoint.h5"
no_tmp f
finish_run f 0 3
fi

# ---- a full file system on 2 ranks: a small tmpfs, where mounting one is allowed (root) ----
mnt=$(mktemp -d /tmp/scdino-durable.XXXXXX) || exit 99
if [ "$MPIEXEC" != none ] && [ "$(id -u)" = 0 ] &&
  mount -t tmpfs -o size=$(($(wc -c <full/checkpoint.h5) * 3 / 2 / 1024 + 64))k tmpfs "$mnt" 2>/dev/null; then
  trap 'umount "$mnt" 2>/dev/null; rmdir "$mnt"' EXIT
  TRAIN_SHARDS=$dir/shards train_deck "$mnt/t" epochs=2 batch_size_per_rank=4 max_steps=3 >t1.nml
  bounded 0 $MPIEXEC -n 2 "$SCDINO" t1.nml
  cp "$mnt/t/checkpoint.h5" t-good.h5 || exit 99
  TRAIN_SHARDS=$dir/shards train_deck "$mnt/t" epochs=2 batch_size_per_rank=4 max_steps=2 restart=.true. >t2.nml
  bounded 1 $MPIEXEC -n 2 "$SCDINO" t2.nml
  expect_grep "error \(rank 0 of 2\): cannot write checkpoint $mnt/t/checkpoint\.h5\.tmp\.[0-9]+: errno 28: No space left on device \(after [0-9]+ of [0-9]+ bytes\).* $mnt/t/checkpoint\.h5 is left as it was"
  nchecks=$((nchecks + 1))
  cmp -s "$mnt/t/checkpoint.h5" t-good.h5 || fail "tmpfs: the failed write changed checkpoint.h5"
  no_tmp "$mnt/t"
  umount "$mnt" && rmdir "$mnt"
  trap - EXIT
else
  rmdir "$mnt"
  echo "no tmpfs could be mounted: the full-disk case on 2 ranks is not run"
fi

# ---- checkpoint.h5 unreadable or missing: the previous one is used ----
train_deck p epochs=2 batch_size_per_rank=4 max_steps=3 >p1.nml
bounded 0 "$SCDINO" p1.nml
train_deck p epochs=2 batch_size_per_rank=4 max_steps=4 restart=.true. >p2.nml
bounded 0 "$SCDINO" p2.nml
nchecks=$((nchecks + 1))
[ "$(attr p/checkpoint.prev.h5 iteration) $(attr p/checkpoint.h5 iteration)" = "3 7" ] ||
  fail "p: previous and current checkpoints at iterations $(attr p/checkpoint.prev.h5 iteration) and $(attr p/checkpoint.h5 iteration), wanted 3 and 7"
cp -r p q && cp -r p m || exit 99
head -c 30000 p/checkpoint.prev.h5 >p/checkpoint.h5 || exit 99
train_deck p epochs=2 batch_size_per_rank=4 max_steps=1 restart=.true. >p3.nml
bounded 0 "$SCDINO" p3.nml
expect_grep "warning: restart: p/checkpoint\.h5 is unreadable \(.*truncated or damaged.*\); continuing from the previous checkpoint p/checkpoint\.prev\.h5 instead"
expect_grep "restart: continuing from p/checkpoint\.prev\.h5 at epoch 0, iteration 3 "
# The damaged file was replaced, not kept as the previous checkpoint.
nchecks=$((nchecks + 1))
[ "$(attr p/checkpoint.prev.h5 iteration) $(attr p/checkpoint.h5 iteration)" = "3 4" ] ||
  fail "p: after the fall-back, previous and current checkpoints at iterations $(attr p/checkpoint.prev.h5 iteration) and $(attr p/checkpoint.h5 iteration), wanted 3 and 4"
finish_run p 0 4

# A run killed between keeping the old file and renaming the new one (file systems without hard links).
rm m/checkpoint.h5 || exit 99
finish_run m 0 3 m/checkpoint.prev.h5
expect_grep "warning: restart: m/checkpoint\.h5 is missing but the previous checkpoint m/checkpoint\.prev\.h5 is there"

# Both unreadable: refused (exit 3), never a silent fresh start.
echo "not a checkpoint" >q/checkpoint.h5
head -c 30000 q/checkpoint.prev.h5 >x.h5 && mv x.h5 q/checkpoint.prev.h5 || exit 99
train_deck q epochs=2 batch_size_per_rank=4 restart=.true. >q.nml
bounded 3 "$SCDINO" q.nml
expect_grep "warning: restart: the previous checkpoint q/checkpoint\.prev\.h5 is unreadable too"
expect_grep "error: checkpoint q/checkpoint\.h5: not a readable HDF5 file"

# ---- a checkpoint of another deck is refused, naming the key ----
cp -r k o && cp -r k a || exit 99
train_deck o epochs=2 batch_size_per_rank=4 restart=.true. |
  sed "s/train_fraction = 1.0/train_fraction = 1.0, channels = 0, 2/" >o.nml
bounded 3 "$SCDINO" o.nml
expect_grep "checkpoint o/checkpoint\.h5: tensor student/backbone\.patch_embed\.proj\.weight has shape \[16, 3, 4, 4\] in the checkpoint, but the model of this deck needs \[16, 2, 4, 4\] \(key 'in_chans' is 3 in the checkpoint but 2 for this deck"
train_deck a epochs=2 batch_size_per_rank=4 restart=.true. |
  sed -e "s/arch = 'custom', patch_size = 4, embed_dim = 16, depth = 2, num_heads = 2, mlp_ratio = 2,/arch = 'vit_tiny', patch_size = 4,/" >a.nml
bounded 3 "$SCDINO" a.nml
expect_grep "checkpoint a/checkpoint\.h5: tensor student/backbone\.cls_token has shape \[1, 1, 16\] in the checkpoint, but the model of this deck needs \[1, 1, 192\] \(key 'embed_dim' is 16 in the checkpoint but 192 for this deck"
nchecks=$((nchecks + 1))
cmp -s o/checkpoint.h5 k/checkpoint.h5 && cmp -s a/checkpoint.h5 k/checkpoint.h5 || fail "a refused checkpoint was changed"
finish
