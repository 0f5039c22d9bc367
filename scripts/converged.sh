#!/usr/bin/env bash
# The converged-quality runs (configs/converged; issue "At convergence"), as two queues of phm-run
# at one thread each, side by side on a 2-core machine. Safe to start again at any time: finished
# runs are skipped, interrupted ones resume (phm-run), and a run folder is never worked on twice at
# once (phm-run's lock). Logs: work/logs/converged_{a,b}.log.
#
# The runs live in results/runs/converged/<corpus>/<config>/seed<S>/, and each finished run's
# result.json is committed (results/runs/.gitignore keeps nothing else): the reports are made from
# those records, and phm-run skips a run whose record is there. A training still going when its
# machine goes away is lost (its checkpoints are not kept in git) and starts again.
# A Multi30k run takes about 1.5 hours, a SICK or SVA run minutes: where the machine goes away
# within the hour, `short` runs only the short ones, which finish.
#   scripts/converged.sh          start both queues in the background and return
#   scripts/converged.sh short    the same with the short runs only (SICK beside SVA)
#   scripts/converged.sh a|b|short-a|short-b   one queue in the foreground
#   scripts/converged.sh report   results/converged_<corpus>.{md,csv,png,curves.png} from the records
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=results/runs
RUN=(env OMP_NUM_THREADS=1 .venv/bin/phm-run --runs-dir $RUNS)
M=configs/converged/multi30k
S=configs/converged/shakespeare

# a SICK run takes minutes, an SVA run one or two: SVA's queue takes SICK's third seed
short_a() { "${RUN[@]}" configs/converged/sick --seeds 1 2; }
short_b() {
  "${RUN[@]}" configs/converged/sva --seeds 1 2 3
  "${RUN[@]}" configs/converged/sick --seeds 3
}

queue_a() {
  "${RUN[@]}" $M/transformer.yaml $M/quaternion.yaml --seeds 1 2 3
  "${RUN[@]}" $M/phm_n2.yaml $M/phm_n16.yaml $M/phm_n4_rank8.yaml
  "${RUN[@]}" $S/transformer.yaml $S/quaternion.yaml --seeds 1 2
  short_a
}

queue_b() {
  "${RUN[@]}" $M/phm_n4.yaml --seeds 1 2 3
  "${RUN[@]}" $M/transformer_equal_params.yaml $M/phm_n8.yaml $M/phm_n4_shared_rule.yaml
  "${RUN[@]}" $S/phm_n4.yaml --seeds 1 2
  short_b
}

start() { # QUEUE-A QUEUE-B: both in the background, each with its log
  mkdir -p work/logs
  nohup "$0" "$1" >> work/logs/converged_a.log 2>&1 &
  nohup "$0" "$2" >> work/logs/converged_b.log 2>&1 &
  echo "started: tail -f work/logs/converged_a.log work/logs/converged_b.log"
}

report() { # CORPUS TITLE: collects the corpus's finished runs, where there are some
  if compgen -G "$RUNS/converged/$1/*/seed*/result.json" > /dev/null; then
    .venv/bin/phm-collect "$RUNS/converged/$1" --out "results/converged_$1" --title "$2"
  else
    echo "converged_$1: no finished run in $RUNS/converged/$1 yet"
  fi
}

case ${1:-both} in
  a) queue_a ;;
  b) queue_b ;;
  short-a) short_a ;;
  short-b) short_b ;;
  both) start a b ;;
  short) start short-a short-b ;;
  report)
    report multi30k "Multi30k en-de trained to convergence: BLEU on test2016"
    report shakespeare "Modern -> Shakespeare trained to convergence: BLEU on the official valid split (selection on held-out training pairs)"
    report sick "SICK trained to convergence: accuracy on SICK trial"
    report sva "Subject-verb agreement sample trained to convergence"
    ;;
  *) echo "usage: $0 [both|short|a|b|short-a|short-b|report]" >&2; exit 2 ;;
esac
