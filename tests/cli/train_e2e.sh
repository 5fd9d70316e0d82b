#!/bin/sh
# tests/cli/train_e2e.sh - `scdino deck` with calculation='train' from TIFF files to checkpoints.
#
# The demo generator writes 480 cell images (8 classes x 60, 5 channels, 50x50) as TIFFs; training
# finds no shards and prepares them first; a small ViT trains for 4 epochs of 25 steps.  Checked:
# the start-up and progress lines, log.txt (one JSON line per epoch with upstream's fields), the
# checkpoint files and their h5ls layout, and that the loss is finite and falls: with a teacher
# temperature lowered from 0.06 to 0.01 over two epochs the epoch mean drops by a fifth or more
# from epoch 0 to epoch 2 on this set.  (The last epoch's mean rises again: at the end of the
# cosine schedules the networks barely move while the centre still adapts.)  Then two ranks, whose
# last batch is partial (385 training images), run one epoch.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
scratch train_e2e
"$top_builddir/scdino_demo_data" -o tiff -n 60 -q || exit 99

deck() { # deck RUN_DIR EPOCHS
  cat <<EOF
! small ViT on the demo cells
&control calculation = 'train', run_dir = '$1', seed = 2 /
&data tiff_dir = 'tiff', shard_dir = 'shards' /
&model arch = 'custom', patch_size = 8, embed_dim = 32, depth = 2, num_heads = 2,
       drop_path_rate = 0.1, out_dim = 1024, head_hidden_dim = 256, head_bottleneck_dim = 64 /
&crops global_size = 32, local_size = 16, local_crops_number = 2,
       global_scale = 0.4, 1.0, local_scale = 0.05, 0.4 /
&training epochs = $2, batch_size_per_rank = 16, warmup_epochs = 1, lr = 0.005,
          momentum_teacher = 0.99, warmup_teacher_temp = 0.06, teacher_temp = 0.01,
          warmup_teacher_temp_epochs = 2, saveckp_freq = 2, log_every = 10 /
&system loader_threads = 1 /
EOF
}
deck run 4 >train.nml
expect_exit 0 "$SCDINO" train.nml
expect_grep "train: no shards in shards yet; preparing them from tiff first"
expect_grep "train: model custom: ViT patch 8, dim 32, depth 2, heads 2, MLP 128, 5 input channels"
expect_grep "train: [0-9]+ parameters \(backbone [0-9]+, head [0-9]+\)"
expect_grep "train: data shards: 480 images of 5 x 50 x 50, 8 classes; train split 385, validation 95"
expect_grep "train: batch 16 per rank x 1 rank = 16 per step; 25 iterations per epoch, 4 epochs, 100 steps"
expect_grep "train: lr peak 0.0003125 "
expect_grep "Epoch \[0/4\] it 10/25 eta [^ ]+ loss [0-9.]+ lr [0-9.e+-]+ wd [0-9.]+ img/s [^ ]+ \| data [0-9]+% compute [0-9]+% comm [0-9]+% \| mem [0-9.]+ [MG]iB"
expect_grep "Averaged stats: loss [0-9.]+ lr [0-9.e+-]+ wd [0-9.]+ \(epoch 3: 25 steps, 385 images"
# A healthy run: neither of DINO's failure modes is warned of (doc/algorithm.md §4.5).
expect_nogrep "the teacher's outputs"

# log.txt: four lines with upstream's fields.
nchecks=$((nchecks + 1))
[ "$(grep -c '^{"train_loss": [-0-9.e]*, "train_lr": [0-9.e-]*, "train_wd": [0-9.e-]*, "epoch": [0-3], "images_per_second": ' run/log.txt)" = 4 ] ||
  { fail "log.txt does not hold 4 epoch lines"; cat run/log.txt >&2; }
l0=$(json_field run/log.txt 1 train_loss)
l1=$(json_field run/log.txt 2 train_loss)
l2=$(json_field run/log.txt 3 train_loss)
l3=$(json_field run/log.txt 4 train_loss)
echo "epoch losses: $l0 $l1 $l2 $l3"
nchecks=$((nchecks + 1))
awk -v a="$l0" -v b="$l1" -v c="$l2" -v d="$l3" 'BEGIN {
  ok = (a > 0 && a < 1e30) && (b > 0 && b < 1e30) && (c > 0 && c < 1e30) && (d > 0 && d < 1e30)
  exit !(ok && b < a && c < 0.8 * a) }' || fail "the loss does not fall: $l0 $l1 $l2 $l3"
nchecks=$((nchecks + 1))
[ "$(json_field run/log.txt 1 epoch)" = 0 ] && [ "$(json_field run/log.txt 4 epoch)" = 3 ] || fail "log.txt epochs"

# Checkpoints: the latest, and epochs 0, 2 (saveckp_freq) and 3 (the last).
for f in checkpoint.h5 checkpoint_0000.h5 checkpoint_0002.h5 checkpoint_0003.h5 input.echo.nml; do
  nchecks=$((nchecks + 1))
  [ -f run/$f ] || fail "run/$f missing"
done
nchecks=$((nchecks + 1))
ls run | grep -q 'tmp' && fail "temporary files left in run"
out=$(h5ls -r run/checkpoint.h5)
expect_grep "^/student/backbone.cls_token +Dataset \{1, 1, 32\}"
expect_grep "^/student/backbone.pos_embed +Dataset \{1, 785, 32\}"
expect_grep "^/student/backbone.patch_embed.proj.weight +Dataset \{32, 5, 8, 8\}"
expect_grep "^/teacher/backbone.blocks.1.attn.qkv.weight +Dataset \{96, 32\}"
expect_grep "^/teacher/head.last_layer.weight_g +Dataset \{1024, 1\}"
expect_grep "^/optimizer/exp_avg/head.last_layer.weight_v +Dataset \{1024, 64\}"
expect_grep "^/optimizer/exp_avg_sq/backbone.norm.bias +Dataset \{32\}"
expect_grep "^/optimizer/step/backbone.blocks.0.mlp.fc1.weight +Dataset \{SCALAR\}"
expect_grep "^/dino_loss/center +Dataset \{1, 1024\}"
expect_grep "^/loader +Group"
expect_nogrep "optimizer/exp_avg/head.last_layer.weight_g"
out=$(h5dump -a /format run/checkpoint.h5 2>/dev/null)
expect_grep '"scdino-checkpoint"'
out=$(h5dump -a /epoch -a /version -a /in_chans run/checkpoint.h5)
expect_grep "\(0\): 4$"
expect_grep "\(0\): 2$"
expect_grep "\(0\): 5$"
# Checksummed (doc/formats.md): Fletcher-32 on the tensors, fixed-length strings.
out=$(h5dump -p -H -d /teacher/backbone.cls_token -a /format run/checkpoint.h5)
expect_grep "CHECKSUM FLETCHER32"
expect_grep "STRSIZE [0-9]+;"

# Two ranks, one epoch: the last batch is partial (193 per rank, padded as DistributedSampler).
if [ "$MPIEXEC" != none ]; then
  deck run2 2 | sed "s/log_every = 10/log_every = 10, max_steps = 13/" >two.nml
  expect_exit 0 $MPIEXEC -n 2 "$SCDINO" two.nml
  expect_grep "batch 16 per rank x 2 ranks = 32 per step; 13 iterations per epoch"
  expect_grep "Epoch \[0/2\] it 13/13 "
  nchecks=$((nchecks + 1))
  [ "$(json_field run2/log.txt 1 images)" = 386 ] || fail "2 ranks: $(json_field run2/log.txt 1 images) images in the epoch, expected 386"
fi
finish
