# tests/cli/train_lib.sh - shared by the training shell tests (sourced after tests/lib.sh).
#   train_data DIR [STD]   a 40-image, 3-channel 20x20 shard set (tests/fixtures/train_mkdata), all for training
#   train_deck RUN_DIR KEY=VALUE...   a tiny-model training deck on ./shards ($TRAIN_SHARDS); the
#                          KEY=VALUE pairs go to &training (e.g. epochs=2 restart=.true. max_steps=3)
#   study_deck RUN_DIR STUDY_KEYS [TRAINING_KEYS [DEBUG_KEYS [SYSTEM_KEYS]]]   a 'study' of that
#                          model on ./shards (3/4 trained on); STUDY_KEYS is the &study group's body,
#                          TRAINING_KEYS merged into &training ("epochs = 3, ...", replacing the
#                          defaults), DEBUG_KEYS a &debug group, SYSTEM_KEYS added to &system
#   ckpt_same A B          the two checkpoints' tensors, optimizer state and centre bit-identical
#   json_field FILE N KEY  KEY of the N-th line (1-based) of a log.txt
# The model: ViT patch 4, D=16, depth 2, 2 heads, head 32-32-16 -> 64, crops 16/8 with 2 locals,
# drop_path 0.2 and augmentation on (both drawn from counter-based streams, so they take part in
# the exactness checks).  OMP_WAIT_POLICY=passive: spinning OpenMP threads would starve the other
# rank on a shared 2-core machine.
OMP_WAIT_POLICY=passive
export OMP_WAIT_POLICY

train_data() {
  "$top_builddir/tests/fixtures/train_mkdata" "$1" 40 3 20 20 ${2:+"$2"} >/dev/null || { echo "train_mkdata failed"; exit 99; }
}

# merge_keys ITEM...: the items, KEY=VALUE or "KEY = VALUE, KEY = VALUE" (values without commas),
# as one group's body; defaults first: a later KEY replaces an earlier one (a deck refuses a key
# given twice).
merge_keys() {
  printf '%s\n' "$@" | tr ',' '\n' |
    awk -F= 'NF > 1 { k = $1; sub(/^[^=]*=/, ""); gsub(/^ +| +$/, "", k); gsub(/^ +| +$/, "")
                      if (!(k in v)) o[n++] = k; v[k] = $0 }
             END { for (i = 0; i < n; i++) printf "%s%s = %s", i ? ", " : "", o[i], v[o[i]] }'
}

train_deck() {
  run=$1; shift
  extra=$(merge_keys warmup_epochs=1 lr=0.05 log_every=100 "$@")
  cat <<EOF
&control calculation = 'train', run_dir = '$run', seed = 5 /
&data shard_dir = '${TRAIN_SHARDS:-shards}', train_fraction = 1.0 /
&model arch = 'custom', patch_size = 4, embed_dim = 16, depth = 2, num_heads = 2, mlp_ratio = 2,
       drop_path_rate = 0.2, out_dim = 64, head_hidden_dim = 32, head_bottleneck_dim = 16 /
&crops global_size = 16, local_size = 8, local_crops_number = 2 /
&training $extra /
&system loader_threads = 1, prefetch_batches = 2 /
EOF
}

ckpt_same() {
  nchecks=$((nchecks + 1))
  if ! "$top_builddir/tests/fixtures/ckpt_compare" -e "$1" "$2" /student /teacher /optimizer /dino_loss >cmp.out 2>&1; then
    fail "$1 and $2 differ"
    sed 's/^/    | /' cmp.out >&2
  fi
}

json_field() {
  sed -n "${2}p" "$1" | sed -e "s/.*\"$3\": \([^,}]*\).*/\1/"
}

study_deck() {
  cat <<EOF
&control calculation = 'study', run_dir = '$1', seed = 5 /
&data shard_dir = 'shards', train_fraction = 0.75 /
&model arch = 'custom', patch_size = 4, embed_dim = 16, depth = 2, num_heads = 2, mlp_ratio = 2,
       drop_path_rate = 0.2, out_dim = 64, head_hidden_dim = 32, head_bottleneck_dim = 16 /
&crops global_size = 16, local_size = 8, local_crops_number = 2 /
&training $(merge_keys "epochs = 2, batch_size_per_rank = 4, warmup_epochs = 1, lr = 0.05, log_every = 100" "${3:-}") /
&features resize = 16, batch_size = 16 /
&knn k = 1, 3 /
&attention images_per_class = 1, image_size = 16, in_pipeline = .false. /
&study $2 /
&system loader_threads = 1, prefetch_batches = 2${5:+, $5} /
EOF
  [ -n "${4:-}" ] && echo "&debug $4 /"
  return 0
}
