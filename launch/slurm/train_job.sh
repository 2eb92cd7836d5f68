# launch/slurm/train_job.sh: the body of the sbatch templates next to it (one_node.sbatch,
# multi_node.sbatch source it; chapter 13). It runs in the batch script, on the job's first node,
# and starts one `tinyscale train` rank per task with srun. Not meant to be run by hand.
#
# What it does:
#   - srun --mpi=pmix starts the ranks; each reads its rank, world and local rank from Slurm and
#     PMIx (no flags), and rank 0 prints the placement of ranks on hosts first. Each task gets
#     the job's --cpus-per-task (Slurm 22.05's srun no longer inherits it: SRUN_CPUS_PER_TASK).
#   - --auto-resume: the first start trains from step 0; every later start of the same job
#     resumes from $CKPT_DIR/latest (chapter 12), so a requeued job continues where it stopped.
#   - a rank that dies (a crash, a lost node) ends the step at once (--kill-on-bad-exit) and the
#     job requeues itself, at most MAX_RESTARTS times (failures are counted in
#     $CKPT_DIR/.train_job_failures; requeues for a warning are not failures).
#   - SIGUSR1 to this script requeues the job too. `#SBATCH --signal=B:USR1@120` makes Slurm send
#     it 120 s before the time limit; before a preemption only where the cluster sets
#     PreemptParameters=send_user_signal (otherwise a preempted job gets SIGTERM, and Slurm
#     requeues it itself if the cluster's PreemptMode is REQUEUE). What a requeue loses is the
#     steps since the last checkpoint, at most train.checkpoint_every of them: set it (0, the
#     default, writes none, and a requeued job would start over; the run says so).
#
# Variables, from the environment sbatch passes on (it exports yours by default), with defaults:
#   TINYSCALE     the program              ./build/default/apps/tinyscale
#   CONFIG        the run config           configs/tiny.toml
#   CKPT_DIR      the checkpoint folder    checkpoints/$SLURM_JOB_NAME-$SLURM_JOB_ID (a requeued
#                                          job keeps its id, so it finds its checkpoints; set
#                                          CKPT_DIR to resume in a new job). Several nodes: on
#                                          a filesystem every node sees (rank 0 and the others
#                                          write their shards there).
#   TRAIN_ARGS    more train options, split on spaces and newlines:
#                 "--tp 4 --pp 2 --set train.steps=1000 --set train.checkpoint_every=100"
#   SRUN_ARGS     more srun options, split likewise: "--cpu-bind=cores"
#   MAX_RESTARTS  requeues after a failed rank, 3
# Paths are relative to the folder sbatch was run from ($SLURM_SUBMIT_DIR): submit from the
# repository's root, or set TINYSCALE_HOME.
set -euo pipefail
cd "${TINYSCALE_HOME:-$SLURM_SUBMIT_DIR}"
source launch/cluster_env.sh

TINYSCALE=${TINYSCALE:-./build/default/apps/tinyscale}
CONFIG=${CONFIG:-configs/tiny.toml}
CKPT_DIR=${CKPT_DIR:-checkpoints/$SLURM_JOB_NAME-$SLURM_JOB_ID}
MAX_RESTARTS=${MAX_RESTARTS:-3}
read -r -d "" -a train_args <<<"${TRAIN_ARGS:-}" || true # split on spaces and newlines
read -r -d "" -a srun_args <<<"${SRUN_ARGS:-}" || true # split on spaces and newlines
[ -z "${SLURM_CPUS_PER_TASK:-}" ] || export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK
mkdir -p "$CKPT_DIR"
failures_file=$CKPT_DIR/.train_job_failures
failures=$(cat "$failures_file" 2>/dev/null || echo 0)

echo "train_job: job $SLURM_JOB_ID, start $((${SLURM_RESTART_COUNT:-0} + 1)) (failed ranks so far:" \
  "$failures of at most $MAX_RESTARTS), $(date -u +%FT%TZ): $SLURM_NTASKS tasks on" \
  "$SLURM_JOB_NUM_NODES node(s) ($SLURM_JOB_NODELIST)"

# Requeue this job: Slurm ends this script and its step, and starts the job again later (a few
# minutes: it holds a requeued job before it schedules it again).
requeue() {
  echo "train_job: $1; requeueing job $SLURM_JOB_ID (it will resume from $CKPT_DIR)"
  scontrol requeue "$SLURM_JOB_ID" || {
    echo "train_job: scontrol requeue $SLURM_JOB_ID failed (was the job submitted with" \
      "--requeue? does the cluster allow it: JobRequeue, or the account's limits?); resubmit" \
      "with the same CKPT_DIR to resume" >&2
    exit 1
  }
  exit 0
}

# srun runs in the background and the script waits for it, so that bash can run the trap as soon
# as the signal arrives (bash runs traps only between commands).
trap 'requeue "SIGUSR1: Slurm warned of the time limit or of preemption"' USR1
srun --kill-on-bad-exit=1 --mpi=pmix ${srun_args[@]+"${srun_args[@]}"} \
  "$TINYSCALE" train --config "$CONFIG" --set "train.checkpoint_dir=\"$CKPT_DIR\"" --auto-resume \
  ${train_args[@]+"${train_args[@]}"} &
status=0
wait $! || status=$?
[ "$status" -eq 0 ] && { echo "train_job: done"; exit 0; }
if [ "$failures" -lt "$MAX_RESTARTS" ]; then
  echo $((failures + 1)) >"$failures_file"
  requeue "a rank failed (srun exit status $status; failure $((failures + 1)) of at most $MAX_RESTARTS)"
fi
echo "train_job: a rank failed (srun exit status $status) and $MAX_RESTARTS requeues are spent;" \
  "giving up. The job's output above names the rank; resubmit with CKPT_DIR=$CKPT_DIR to resume" >&2
exit "$status"
