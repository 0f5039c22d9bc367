#!/usr/bin/env bash
# The converged-quality runs (configs/converged; issue "At convergence"), as two queues of phm-run
# at one thread each, side by side on a 2-core machine. Safe to start again at any time: finished
# runs are skipped, interrupted ones resume (phm-run), and a run folder is never worked on twice at
# once (phm-run's lock). Logs: work/logs/converged_{a,b}.log. Reports: make converged-report.
#   scripts/converged.sh          start both queues in the background and return
#   scripts/converged.sh a|b      run one queue in the foreground
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=(env OMP_NUM_THREADS=1 .venv/bin/phm-run)
M=configs/converged/multi30k
S=configs/converged/shakespeare
M_LR=configs/converged/multi30k_lr_check

queue_a() {
  "${RUN[@]}" $M_LR/transformer_lr002.yaml $M_LR/transformer_lr001.yaml $M_LR/transformer_lr004.yaml
  "${RUN[@]}" $M/transformer.yaml $M/quaternion.yaml --seeds 1 2 3
  "${RUN[@]}" $M/phm_n2.yaml $M/phm_n16.yaml $M/phm_n4_rank8.yaml
  "${RUN[@]}" $S/transformer.yaml $S/quaternion.yaml --seeds 1 2
  "${RUN[@]}" configs/converged/sick --seeds 1 2 3
}

queue_b() {
  "${RUN[@]}" $M_LR/phm_n4_lr002.yaml $M_LR/phm_n4_lr001.yaml $M_LR/phm_n4_lr004.yaml
  "${RUN[@]}" $M/phm_n4.yaml --seeds 1 2 3
  "${RUN[@]}" $M/transformer_equal_params.yaml $M/phm_n8.yaml $M/phm_n4_shared_rule.yaml
  "${RUN[@]}" $S/phm_n4.yaml --seeds 1 2
  "${RUN[@]}" configs/converged/sva --seeds 1 2 3
}

case ${1:-both} in
  a) queue_a ;;
  b) queue_b ;;
  both)
    mkdir -p work/logs
    nohup "$0" a >> work/logs/converged_a.log 2>&1 &
    nohup "$0" b >> work/logs/converged_b.log 2>&1 &
    echo "started: tail -f work/logs/converged_a.log work/logs/converged_b.log"
    ;;
  *) echo "usage: $0 [a|b]" >&2; exit 2 ;;
esac
