#!/usr/bin/env bash
# launch/mpirun/train_hosts.sh: the run of the Slurm templates (launch/slurm/) without a
# scheduler: Open MPI's mpirun starts RANKS_PER_HOST ranks on every host of a hostfile (chapter 13).
#
#   HOSTFILE=my_hosts RANKS_PER_HOST=8 CONFIG=configs/gpt2-124m.toml \
#     TRAIN_ARGS="--tp 8 --dp 2 --set train.device=\"cuda\"" launch/mpirun/train_hosts.sh
#
# Ranks are numbered host by host (--map-by ppr:N:node: ranks 0..N-1 on the first host), so, as
# under Slurm, a tp group of at most N ranks dividing N stays inside one host. Each rank reads its
# rank, world and local rank (its GPU) from Open MPI's variables. Threads are not pinned
# (--bind-to none): a rank's CPU threads use the cores it shares with the others on its host.
# Run it again after a failure: --auto-resume continues from $CKPT_DIR/latest.
#
# Variables, with defaults (paths relative to the repository's root):
#   HOSTFILE         the hosts, as launch/mpirun/hostfile.example (required)
#   RANKS_PER_HOST   ranks on each host          1
#   TINYSCALE        the program                 ./build/default/apps/tinyscale
#   CONFIG           the run config              configs/tiny.toml
#   CKPT_DIR         the checkpoint folder       checkpoints/mpirun
#   TRAIN_ARGS       more train options, split on spaces and newlines
#   MPIRUN_ARGS      more mpirun options, split likewise (--oversubscribe, --mca ...)
set -euo pipefail
cd "$(dirname "$0")/../.."
source launch/cluster_env.sh

: "${HOSTFILE:?set HOSTFILE to a hostfile such as launch/mpirun/hostfile.example}"
[ -r "$HOSTFILE" ] || { echo "train_hosts: expected a readable hostfile, found none at '$HOSTFILE'" >&2; exit 1; }
RANKS_PER_HOST=${RANKS_PER_HOST:-1}
TINYSCALE=${TINYSCALE:-./build/default/apps/tinyscale}
CONFIG=${CONFIG:-configs/tiny.toml}
CKPT_DIR=${CKPT_DIR:-checkpoints/mpirun}
read -r -d "" -a train_args <<<"${TRAIN_ARGS:-}" || true # split on spaces and newlines
read -r -d "" -a mpirun_args <<<"${MPIRUN_ARGS:-}" || true # split on spaces and newlines
hosts=$(grep -cEv '^[[:space:]]*(#|$)' "$HOSTFILE" || true)
[ "$hosts" -ge 1 ] || { echo "train_hosts: $HOSTFILE names no host" >&2; exit 1; }

# mpirun passes OMPI_MCA_* on by itself; NCCL's and UCX's variables, the thread count, PATH and
# LD_LIBRARY_PATH (CUDA's libraries) need -x. Open MPI itself must be at the same path on every
# host (else add --prefix to MPIRUN_ARGS).
forward=(-x PATH)
[ -z "${LD_LIBRARY_PATH:-}" ] || forward+=(-x LD_LIBRARY_PATH)
for name in $(compgen -e | grep -E '^(NCCL_|UCX_|TINYSCALE_)' || true); do forward+=(-x "$name"); done

echo "train_hosts: $((hosts * RANKS_PER_HOST)) ranks, $RANKS_PER_HOST on each of $hosts host(s) of $HOSTFILE"
exec mpirun --hostfile "$HOSTFILE" -np "$((hosts * RANKS_PER_HOST))" \
  --map-by "ppr:$RANKS_PER_HOST:node" --bind-to none "${forward[@]}" \
  ${mpirun_args[@]+"${mpirun_args[@]}"} \
  "$TINYSCALE" train --config "$CONFIG" --set "train.checkpoint_dir=\"$CKPT_DIR\"" --auto-resume \
  ${train_args[@]+"${train_args[@]}"}
