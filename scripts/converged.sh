#!/usr/bin/env bash
# The converged-quality runs (configs/converged), as one queue of phm-run at two threads: each run
# finishes in half the time of two queues at one thread side by side, and a training still going when
# its machine goes away is lost (docs/experiments.md, "Training to convergence"). Safe to start again
# at any time: finished runs are skipped, interrupted ones resume (phm-run), and a run folder is never
# worked on twice at once (phm-run's lock).
#
# The runs live in results/runs/converged/<corpus>/<config>/seed<S>/, and each finished run's
# result.json is committed (results/runs/.gitignore keeps nothing else): the reports are made from
# those records, and phm-run skips a run whose record is there.
#   scripts/converged.sh          start the queue in the background and return (log: work/logs/converged.log)
#   scripts/converged.sh queue    the queue in the foreground
#   scripts/converged.sh report   results/converged_<corpus>.{md,csv,png,curves.png} from the records
#   THREADS=1 scripts/converged.sh queue   the queue at another thread count
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=results/runs
RUN=(env OMP_NUM_THREADS="${THREADS:-2}" .venv/bin/phm-run --runs-dir $RUNS)
M=configs/converged/multi30k
S=configs/converged/shakespeare

# One run towards each of the issue's targets first, then the seeds of their means, then the rest
# of the frontier: whatever point the queue is stopped at, what is done answers the most.
queue() {
  # the recipe check's top (results/converged_multi30k_lr_check_lr008_lr016): every kind of the
  # Multi30k table at 0.008, then at 0.016 where 0.008 was best; 8 epochs, seed 1 (0.001-0.004 ran
  # first, the whole folder again at the end)
  "${RUN[@]}" configs/converged/multi30k_lr_check/{transformer,phm_n4,quaternion,transformer_equal_params}_lr008.yaml
  "${RUN[@]}" configs/converged/multi30k_lr_check/{phm_n4,quaternion,transformer_equal_params}_lr016.yaml  # best at 0.008
  # every kind at its own best lr: one run towards each target, then the seeds of their means
  "${RUN[@]}" $M/transformer.yaml $M/phm_n4_lr008.yaml --seeds 1 2 3
  "${RUN[@]}" $M/transformer_equal_params_lr008.yaml $M/quaternion_lr008.yaml $S/transformer.yaml $S/phm_n4_lr008.yaml
  "${RUN[@]}" $M/quaternion_lr008.yaml --seeds 1 2 3
  "${RUN[@]}" $M/transformer_equal_params_lr008.yaml --seeds 1 2 3  # seed 1 leads PHM n=4 by 1.9: is it the seed?
  "${RUN[@]}" $S/transformer.yaml $S/phm_n4_lr008.yaml $S/quaternion_lr008.yaml --seeds 1 2
  "${RUN[@]}" $M/phm_n{2,8,16}_lr008.yaml $M/phm_n4_{shared_rule,rank8}_lr008.yaml  # the frontier, at PHM's lr
  # every kind at the dense twin's lr, 0.004, as ran before the check was taken on to 0.008
  "${RUN[@]}" $M/phm_n4.yaml --seeds 1 2
  "${RUN[@]}" $M/transformer_equal_params.yaml $M/quaternion.yaml $S/phm_n4.yaml
  "${RUN[@]}" $M/transformer_n2_params_lr008.yaml  # PHM n=2 is level with the dense twin: is a dense model of its size?
  "${RUN[@]}" $M/phm_n4_algebra_init.yaml --seeds 1 2 3  # PHM n=4 trails the quaternion model: is it the rule's start?
  "${RUN[@]}" configs/converged/sick configs/converged/sva --seeds 1 2 3
  "${RUN[@]}" configs/converged/multi30k_lr_check  # the whole check, 0.001-0.016, its records in $RUNS
}

report() { # CORPUS TITLE [REPORT]: collects the corpus's finished runs, where there are some
  if compgen -G "$RUNS/converged/$1/*/seed*/result.json" > /dev/null; then
    .venv/bin/phm-collect "$RUNS/converged/$1" --out "results/${3:-converged_$1}" --title "$2"
  else
    echo "converged_$1: no finished run in $RUNS/converged/$1 yet"
  fi
}

case ${1:-start} in
  start)
    mkdir -p work/logs
    nohup "$0" queue >> work/logs/converged.log 2>&1 &
    echo "started: tail -f work/logs/converged.log"
    ;;
  queue) queue ;;
  report)
    report multi30k "Multi30k en-de trained to convergence: BLEU on test2016"
    report shakespeare "Modern -> Shakespeare trained to convergence: BLEU on the official valid split (selection on held-out training pairs)"
    report sick "SICK trained to convergence: accuracy on SICK trial"
    report sva "Subject-verb agreement sample trained to convergence"
    # lr 0.001-0.004 ran before records were kept in results/runs: results/converged_multi30k_lr_check.md
    report multi30k_lr_check "Multi30k en-de, the learning-rate check at lr 0.008 and 0.016 (8 epochs, 1 seed): BLEU on test2016" \
      converged_multi30k_lr_check_lr008_lr016
    ;;
  *) echo "usage: $0 [start|queue|report]" >&2; exit 2 ;;
esac
