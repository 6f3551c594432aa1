#!/bin/bash
# A requeueable Slurm batch job that checkpoints when the node agent announces a reclaim.
#
#   sbatch examples/slurm_job.sh
#
# sco-checkpoint run starts the training in its own process group. On a reclaim notice it
# sends SIGUSR1 to that group and waits for the checkpoint window (the smaller of --window
# and the notice's checkpoint_by). The job reports "checkpoint done" by touching
# $SCO_CHECKPOINT_DONE (or by exiting 0); anything else is reported to the agent as failed.
# The agent then requeues the job; on its next start it resumes from the checkpoint.
#
#SBATCH --job-name=restart-safe
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=%x-%j.out

set -euo pipefail

STATE=${STATE:-$HOME/checkpoints/${SLURM_JOB_NAME:-job}.json}
mkdir -p "$(dirname "$STATE")"
echo "start ${SLURM_JOB_ID:-?} restart=${SLURM_RESTART_COUNT:-0} state=$STATE"

# The workload: any program works as long as, on SIGUSR1, it saves its state and then
# touches $SCO_CHECKPOINT_DONE. Here a small shell loop stands in for a training run.
exec sco-checkpoint run --signal USR1 --window 20 -- bash -c '
    state=$1
    step=$(cat "$state" 2>/dev/null || echo 0)
    checkpoint() {
        echo "$step" > "$state.tmp" && mv "$state.tmp" "$state"
        echo "checkpointed at step $step (notice in $SCO_CHECKPOINT_NOTICE)"
        touch "$SCO_CHECKPOINT_DONE"
    }
    trap checkpoint USR1
    while [ "$step" -lt 100000 ]; do
        sleep 1 & wait $!          # bash runs a trap only between commands: keep them short
        step=$((step + 1))
    done
    echo "$step" > "$state"
' training "$STATE"
