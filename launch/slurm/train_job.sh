# launch/slurm/train_job.sh: the body of the sbatch templates next to it (one_node.sbatch,
# multi_node.sbatch source it; chapter 13). It runs in the batch script, on the job's first node,
# and starts one `tinyscale train` rank per task with srun. Not meant to be run by hand.
#
# What it does:
#   - srun --mpi=pmix starts the ranks; each reads its rank, world and local rank from Slurm and
#     PMIx (no flags), and rank 0 prints the placement of ranks on hosts first.
#   - --auto-resume: the first start trains from step 0; every later start of the same job
#     resumes from $CKPT_DIR/latest (chapter 12), so a requeued job continues where it stopped.
#   - a rank that dies (a crash, a lost node) ends the step at once (--kill-on-bad-exit) and the
#     job requeues itself, at most MAX_RESTARTS times (Slurm counts them: SLURM_RESTART_COUNT).
#   - the warning Slurm sends before preemption or the time limit (SIGUSR1, from
#     `#SBATCH --signal=B:USR1@120`) requeues it too. What is lost is the steps since the last
#     checkpoint: set train.checkpoint_every (0, the default, writes none, and a requeued job
#     would start over; the run says so) so that they take less than the warning's 120 s.
#
# Variables, from the environment sbatch passes on (it exports yours by default), with defaults:
#   TINYSCALE     the program              ./build/default/apps/tinyscale
#   CONFIG        the run config           configs/tiny.toml
#   CKPT_DIR      the checkpoint folder    checkpoints/$SLURM_JOB_NAME  (one per run: a new run
#                                          in an old folder resumes the old run)
#   TRAIN_ARGS    more train options, split on spaces and newlines:
#                 "--tp 4 --pp 2 --set train.steps=1000 --set train.checkpoint_every=100"
#   SRUN_ARGS     more srun options, split likewise: "--cpu-bind=cores"
#   MAX_RESTARTS  requeues after a failure, 3
# Paths are relative to the folder sbatch was run from ($SLURM_SUBMIT_DIR): submit from the
# repository's root, or set TINYSCALE_HOME.
set -euo pipefail
cd "${TINYSCALE_HOME:-$SLURM_SUBMIT_DIR}"
source launch/cluster_env.sh

TINYSCALE=${TINYSCALE:-./build/default/apps/tinyscale}
CONFIG=${CONFIG:-configs/tiny.toml}
CKPT_DIR=${CKPT_DIR:-checkpoints/$SLURM_JOB_NAME}
MAX_RESTARTS=${MAX_RESTARTS:-3}
read -r -d "" -a train_args <<<"${TRAIN_ARGS:-}" || true # split on spaces and newlines
read -r -d "" -a srun_args <<<"${SRUN_ARGS:-}" || true # split on spaces and newlines
restarts=${SLURM_RESTART_COUNT:-0}

echo "train_job: job $SLURM_JOB_ID, start $((restarts + 1)) of at most $((MAX_RESTARTS + 1))," \
  "$(date -u +%FT%TZ): $SLURM_NTASKS tasks on $SLURM_JOB_NUM_NODES node(s) ($SLURM_JOB_NODELIST)"

# Requeue this job: Slurm ends this script and its step, and starts the job again later (a few
# minutes: it holds a requeued job before it schedules it again).
requeue() {
  echo "train_job: $1; requeueing job $SLURM_JOB_ID (it will resume from $CKPT_DIR)"
  scontrol requeue "$SLURM_JOB_ID"
  exit 0
}

# srun runs in the background and the script waits for it, so that bash can run the trap as soon
# as Slurm's warning arrives (bash runs traps only between commands).
trap 'requeue "Slurm warned of preemption or of the time limit (SIGUSR1)"' USR1
srun --kill-on-bad-exit=1 --mpi=pmix "${srun_args[@]}" \
  "$TINYSCALE" train --config "$CONFIG" --set "train.checkpoint_dir=\"$CKPT_DIR\"" --auto-resume \
  "${train_args[@]}" &
status=0
wait $! || status=$?
[ "$status" -eq 0 ] && { echo "train_job: done"; exit 0; }
[ "$restarts" -lt "$MAX_RESTARTS" ] && requeue "a rank failed (srun exit status $status)"
echo "train_job: a rank failed (srun exit status $status) and $MAX_RESTARTS requeues are spent;" \
  "giving up. The job's output above names the rank; resubmit to resume from $CKPT_DIR" >&2
exit "$status"
