#!/bin/sh
# tests/cli/slurm_scripts.sh - the AWS ParallelCluster job scripts (examples/slurm): bash -n and
# shellcheck (when installed) over every script; the deck and checkpoint helpers of env.sh on real
# decks and a real checkpoint; and train.sbatch's requeue loop end to end on this machine, with
# stand-ins for srun and scontrol: a run of 2 epochs limited to a few steps per launch must be
# requeued until checkpoint.h5 says every epoch ran, then end with status 0; SIGUSR1 to the batch
# shell (Slurm's time-limit warning) must reach scdino, which checkpoints, and the job requeues.
# (Slurm itself, EFA, NCCL and GPUs can only be checked on a cluster; see doc/parallelcluster.md.)
. "$top_srcdir/tests/lib.sh"
slurm="$top_srcdir/examples/slurm"
scratch slurm_scripts

command -v bash >/dev/null 2>&1 || skip "no bash"
for f in "$slurm"/*.sbatch "$slurm"/env.sh "$top_srcdir"/bench/slurm/*.sbatch; do
  expect_exit 0 bash -n "$f"
done
if command -v shellcheck >/dev/null 2>&1; then
  (cd "$top_srcdir" && shellcheck -x -s bash examples/slurm/*.sbatch examples/slurm/env.sh) >shellcheck.out 2>&1 ||
    { fail "shellcheck reports problems"; sed 's/^/    | /' shellcheck.out >&2; }
  nchecks=$((nchecks + 1))
else
  echo "shellcheck not installed: only bash -n"
fi

# ---- helpers of env.sh ----
helpers() { bash -c ". '$slurm/env.sh'; $1"; }
out=$(helpers "scdino_deck_value run_dir '$top_srcdir/input/pbmc_vits16.nml'")
expect_grep '^/fsx/scdino/pbmc_vits16$'
out=$(helpers "scdino_deck_restarts '$top_srcdir/input/pbmc_vits16.nml' && echo yes; scdino_deck_restarts '$top_srcdir/input/demo.nml' || echo no")
expect_grep '^yes$'
expect_grep '^no$'
printf "&control calculation = \"train\", run_dir = 'r' /\n&training restart = T /\n" >inline.nml
out=$(helpers "scdino_deck_for features inline.nml step.nml && cat step.nml; scdino_deck_restarts inline.nml && echo restarts")
expect_grep "^&control calculation = \"features\", run_dir = 'r' /$"
expect_grep '^restarts$'

# ---- train.sbatch, requeued until done ----
"$top_builddir/tests/fixtures/knn_mkdata" . >/dev/null || exit 99
mkdir -p bin && cat >bin/srun <<'EOF'
#!/bin/sh
# srun stand-in: "--mpi=list" names pmix; otherwise drop the options and run the command here.
[ "$1" = --mpi=list ] && { echo "MPI plugin types are... pmix"; exit 0; }
while [ $# -gt 0 ]; do case $1 in --*) shift ;; *) break ;; esac; done
exec "$@"
EOF
cat >bin/scontrol <<'EOF'
#!/bin/sh
# scontrol stand-in: records "requeue JOBID".
echo "$*" >>"$REQUEUE_LOG"
EOF
chmod +x bin/srun bin/scontrol || exit 99
cat >train.nml <<EOF
&control calculation = 'train', run_dir = 'run', verbosity = 0 /
&data shard_dir = 'shards' /
&model arch = 'custom', patch_size = 4, embed_dim = 8, depth = 1, num_heads = 2, out_dim = 16,
  head_hidden_dim = 8, head_bottleneck_dim = 4 /
&crops global_size = 8, local_size = 4, local_crops_number = 1 /
&training epochs = 2, batch_size_per_rank = 4, max_steps = 12, warmup_epochs = 0, restart = .true. /
&system device = 'cpu', loader_threads = 1 /
EOF
REQUEUE_LOG="$dir/requeues"
export REQUEUE_LOG
launch=0
status=1
while [ "$launch" -lt 8 ]; do
  : >"$REQUEUE_LOG"
  out=$(PATH="$dir/bin:$(dirname "$SCDINO"):$PATH" SCDINO="$SCDINO" SCDINO_SLURM_DIR="$slurm" \
    SLURM_JOB_ID=4242 SLURM_RESTART_COUNT=$launch SLURM_NNODES=1 SLURM_NTASKS=1 SLURM_SUBMIT_DIR="$dir" \
    bash "$slurm/train.sbatch" train.nml 2>&1)
  status=$?
  launch=$((launch + 1))
  printf '%s\n' "$out" | sed "s/^/    launch $launch: /"
  [ -s "$REQUEUE_LOG" ] || break
  grep -q '^requeue 4242$' "$REQUEUE_LOG" || fail "launch $launch: scontrol was called as: $(cat "$REQUEUE_LOG")"
done
nchecks=$((nchecks + 3))
[ "$status" = 0 ] || fail "the last launch ended with status $status"
printf '%s\n' "$out" | grep -q 'training complete' || fail "the last launch did not report completion"
# Every launch but the last runs max_steps = 12 steps: ceil(epochs x steps per epoch / 12) launches.
niter=$(helpers "scdino_ckpt_attr run/checkpoint.h5 niter_per_epoch")
want=$(((2 * ${niter:-0} + 11) / 12))
[ "${niter:-0}" -gt 6 ] && [ "$launch" = "$want" ] || fail "$launch launches for 2 epochs of ${niter:-?} steps (expected $want)"
out=$(helpers "scdino_ckpt_attr run/checkpoint.h5 epoch; scdino_training_done run && echo done")
expect_grep '^2$'
expect_grep '^done$'
cp run/checkpoint.h5 done.h5 || exit 99
# The time-limit warning: SIGUSR1 to the batch shell (--signal=B:USR1@300) reaches scdino, which
# checkpoints and exits 0; the job requeues itself, naming the signal.
rm -rf run && sed 's/epochs = 2/epochs = 1000/; s/max_steps = 12/max_steps = 0/' train.nml >long.nml
: >"$REQUEUE_LOG"
PATH="$dir/bin:$PATH" SCDINO="$SCDINO" SCDINO_SLURM_DIR="$slurm" SLURM_JOB_ID=4245 SLURM_NNODES=1 SLURM_NTASKS=1 \
  bash "$slurm/train.sbatch" long.nml >usr1.out 2>&1 &
job=$!
i=0
while [ ! -f run/checkpoint.h5 ] && [ $i -lt 3000 ]; do sleep 0.1; i=$((i + 1)); done
kill -USR1 $job
wait $job
status=$?
out=$(cat usr1.out)
nchecks=$((nchecks + 2))
[ "$status" = 0 ] || fail "after SIGUSR1 the job ended with status $status"
grep -q '^requeue 4245$' "$REQUEUE_LOG" || fail "after SIGUSR1 the job did not requeue itself"
expect_grep 'SIGUSR1 \(time limit near\): asking scdino to checkpoint and stop'
expect_grep 'stopped by SIGUSR1 at epoch [0-9]+ of 1000; requeueing job 4245'
out=$(helpers "scdino_training_done run || echo not-done")
expect_grep '^not-done$'

# A finished run is not started again; a deck without restart = .true. is refused.
rm -rf run && mkdir run && cp done.h5 run/checkpoint.h5 || exit 99
out=$(PATH="$dir/bin:$PATH" SCDINO="$SCDINO" SCDINO_SLURM_DIR="$slurm" SLURM_JOB_ID=4243 SLURM_NNODES=1 \
  SLURM_NTASKS=1 bash "$slurm/train.sbatch" train.nml 2>&1)
expect_grep 'already holds every epoch; nothing to train'
sed 's/restart = .true./restart = .false./' train.nml >norestart.nml
expect_exit 2 env PATH="$dir/bin:$PATH" SCDINO="$SCDINO" SCDINO_SLURM_DIR="$slurm" SLURM_JOB_ID=4244 \
  SLURM_NNODES=1 SLURM_NTASKS=1 bash "$slurm/train.sbatch" norestart.nml
expect_grep 'must set restart = .true.'
finish
