# examples/slurm/env.sh - shared settings and helpers of the scdino job scripts for AWS
# ParallelCluster (sourced by prepare.sbatch, train.sbatch, features_knn.sbatch, pipeline.sbatch).
#
# Settings from the environment (sbatch --export or the submitting shell):
#   SCDINO_PREFIX   where scdino is installed (default /fsx/sw/scdino): $SCDINO_PREFIX/bin/scdino
#   SCDINO_LAUNCH   srun (default when Slurm has PMIx) or mpirun
#   SCDINO_MAX_LAUNCHES  give up after this many launches of one job (default 50)
# shellcheck shell=bash

SCDINO_PREFIX=${SCDINO_PREFIX:-/fsx/sw/scdino}
SCDINO=${SCDINO:-$SCDINO_PREFIX/bin/scdino}
SCDINO_MAX_LAUNCHES=${SCDINO_MAX_LAUNCHES:-50}
export PATH="$SCDINO_PREFIX/bin:$PATH"

# ---- the fabric: libfabric's EFA provider, NCCL through the aws-ofi-nccl plugin -------------------
# ParallelCluster AMIs install libfabric and the EFA provider in /opt/amazon/efa, Open MPI 4 in
# /opt/amazon/openmpi and the aws-ofi-nccl plugin in /opt/amazon/ofi-nccl (or under the
# Deep Learning AMI's /opt/aws-ofi-nccl); NCCL itself comes with the CUDA build of scdino.
for d in /opt/amazon/ofi-nccl/lib /opt/aws-ofi-nccl/lib /opt/amazon/efa/lib /opt/amazon/openmpi/lib64; do
  [ -d "$d" ] && LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
export LD_LIBRARY_PATH
[ -d /opt/amazon/openmpi/bin ] && export PATH="/opt/amazon/openmpi/bin:$PATH"
export FI_PROVIDER=efa
export FI_EFA_FORK_SAFE=1 # the loader threads and libraries may fork after memory is registered
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}          # INFO shows "NET/OFI Selected Provider is efa"
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-^lo,docker,veth}  # bootstrap over the VPC interface
export NCCL_BUFFSIZE=${NCCL_BUFFSIZE:-8388608}
export NCCL_P2P_NET_CHUNKSIZE=${NCCL_P2P_NET_CHUNKSIZE:-524288}
# Compute threads: an idle rank yields its cores to the loader threads.
export OMP_WAIT_POLICY=passive
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-4}}
export OMP_PROC_BIND=${OMP_PROC_BIND:-false}

# ---- per instance type ------------------------------------------------------------------------------
# Read the GPU model on the first node (the queue decides the instance type):
#   g4dn.12xlarge  4 x T4 (sm_75, 16 GB), 48 vCPUs, EFA 50 Gbps, no GPUDirect RDMA, no bf16 (fp16)
#   p3.16xlarge    8 x V100 (sm_70, 16 GB, NVLink), 64 vCPUs, 25 Gbps without EFA, no bf16 (fp16)
#   p4d.24xlarge   8 x A100 (sm_80, 40 GB), 96 vCPUs, 4 x 100 Gbps EFA, GPUDirect RDMA
#   p5.48xlarge    8 x H100 (sm_90, 80 GB), 192 vCPUs, 32 EFA interfaces (3200 Gbps), GPUDirect RDMA
scdino_instance() {
  local gpu
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
  case $gpu in
    *T4*) echo g4dn ;;
    *V100*) echo p3 ;;
    *A100*) echo p4d ;;
    *H100* | *H200*) echo p5 ;;
    "") echo cpu ;;
    *) echo other ;;
  esac
}

scdino_fabric() { # scdino_fabric INSTANCE: GPUDirect RDMA where the NICs can reach GPU memory
  case $1 in
    p4d | p5) export FI_EFA_USE_DEVICE_RDMA=1 ;;
    p3) unset FI_EFA_USE_DEVICE_RDMA FI_PROVIDER ;; # no EFA: libfabric's TCP, NCCL's sockets between nodes
    *) unset FI_EFA_USE_DEVICE_RDMA ;;
  esac
}

# ---- launching --------------------------------------------------------------------------------------
# One rank per GPU: the job asks for --ntasks-per-node = --gpus-per-node.  srun with PMIx is
# preferred (Slurm binds and accounts every rank); Open MPI's mpirun is the fallback.
scdino_launch() { # scdino_launch ARGS... (runs in the background; sets $launch_pid)
  local how=${SCDINO_LAUNCH:-}
  if [ -z "$how" ]; then
    if srun --mpi=list 2>&1 | grep -q pmix; then how=srun; else how=mpirun; fi
  fi
  if [ "$how" = srun ]; then
    srun --mpi=pmix --cpu-bind=cores --kill-on-bad-exit=1 "$@" &
  else
    # mpirun -np "$SLURM_NTASKS" --map-by ppr:"$SLURM_NTASKS_PER_NODE":node:PE="$SLURM_CPUS_PER_TASK"
    mpirun -np "$SLURM_NTASKS" --map-by "ppr:${SLURM_NTASKS_PER_NODE:-1}:node:PE=${SLURM_CPUS_PER_TASK:-1}" \
      --bind-to core -x PATH -x LD_LIBRARY_PATH -x FI_PROVIDER -x FI_EFA_FORK_SAFE -x FI_EFA_USE_DEVICE_RDMA \
      -x NCCL_DEBUG -x NCCL_SOCKET_IFNAME -x NCCL_BUFFSIZE -x NCCL_P2P_NET_CHUNKSIZE -x OMP_WAIT_POLICY \
      -x OMP_NUM_THREADS -x OMP_PROC_BIND "$@" &
  fi
  launch_pid=$!
  scdino_launcher=$how
}

# Preemption: Slurm sends SIGUSR1 to this batch shell (#SBATCH --signal=B:USR1@300) shortly before
# the time limit, and SIGTERM to everything when the job is preempted or cancelled.  Both are
# passed on to scdino, which finishes the step, writes run_dir/checkpoint.h5 and exits 0.
scdino_forward_signals() {
  trap 'echo "scdino job: SIGUSR1 (time limit near): asking scdino to checkpoint and stop"; kill -USR1 "$launch_pid" 2>/dev/null' USR1
  # Open MPI's mpirun answers SIGTERM by killing the ranks a second later (too soon for a
  # checkpoint) and forwards only SIGUSR1, which scdino treats the same way (doc/faults.md).
  trap 'echo "scdino job: SIGTERM (preempted or cancelled): asking scdino to checkpoint and stop"
        if [ "${scdino_launcher:-}" = mpirun ]; then kill -USR1 "$launch_pid"; else kill -TERM "$launch_pid"; fi 2>/dev/null' TERM
}

scdino_wait() { # wait for $launch_pid through any trapped signals; returns its exit status
  local rc
  while :; do
    wait "$launch_pid"
    rc=$?
    kill -0 "$launch_pid" 2>/dev/null || return "$rc"
  done
}

# ---- decks ------------------------------------------------------------------------------------------
# Each step runs the user's deck with its calculation replaced, written next to the job log.
scdino_deck_for() { # scdino_deck_for CALCULATION DECK OUT
  sed -E "s/(calculation[[:space:]]*=[[:space:]]*)(['\"])[A-Za-z]+(['\"])/\1\2$1\3/I" "$2" >"$3"
  grep -Eqi "calculation[[:space:]]*=[[:space:]]*['\"]$1['\"]" "$3" || {
    echo "scdino job: $2 has no calculation = '...' line to replace" >&2
    return 1
  }
}

scdino_deck_value() { # scdino_deck_value KEY DECK: a quoted string value of the deck ('' if unset)
  sed -nE "s/.*(^|[[:space:],&])$1[[:space:]]*=[[:space:]]*['\"]([^'\"]*)['\"].*/\2/Ip" "$2" | head -n 1
}

scdino_deck_restarts() { # whether the deck says restart = .true. (requeued jobs must continue)
  grep -Eqi "(^|[[:space:],])restart[[:space:]]*=[[:space:]]*(\.?t(rue)?\.?)([[:space:],/!]|$)" "$1"
}

# ---- checkpoints ------------------------------------------------------------------------------------
# The contract with scdino's train (doc/parallelcluster.md): checkpoint.h5 carries the root
# attributes training_complete (1 once every epoch has run), stopped_by (why a launch stopped
# early: "SIGTERM", "SIGUSR1", "max_steps", ...), epoch (the next epoch to run) and epochs.
scdino_ckpt_attr() { # scdino_ckpt_attr FILE NAME: a root attribute's value (quotes removed), or nothing
  h5dump -a "/$2" "$1" 2>/dev/null | sed -n 's/^ *(0): *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' | head -n 1
}

scdino_training_done() { # scdino_training_done RUN_DIR: 0 when checkpoint.h5 says all epochs ran
  local ck=$1/checkpoint.h5 c e n
  [ -f "$ck" ] || return 1
  c=$(scdino_ckpt_attr "$ck" training_complete)
  [ -n "$c" ] && { [ "$c" = 1 ]; return; }
  e=$(scdino_ckpt_attr "$ck" epoch) # checkpoints without training_complete
  n=$(scdino_ckpt_attr "$ck" epochs)
  [ -n "$e" ] && [ -n "$n" ] && [ "$e" -ge "$n" ]
}

scdino_requeue() { # scdino_requeue REASON...: put this job back in the queue, same id, same script
  local launches=$((${SLURM_RESTART_COUNT:-0} + 1))
  set -- "$*"
  if [ "$launches" -ge "$SCDINO_MAX_LAUNCHES" ]; then
    echo "scdino job: $1, but this job has run $launches times (SCDINO_MAX_LAUNCHES); not requeued" >&2
    return 1
  fi
  echo "scdino job: $1; requeueing job $SLURM_JOB_ID (launch $launches)"
  scontrol requeue "$SLURM_JOB_ID"
}
