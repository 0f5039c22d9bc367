#!/usr/bin/env bash
# The training-recipe runs (configs/converged/multi30k_recipe, the width trend at the iwslt size): two
# queues at one thread each over one list (scripts/recipe.list: a config and optionally its seeds per
# line, in order of priority). Each queue takes the first line whose runs are not finished and not held
# by the other queue (phm-run's lock refuses a run folder in use), so the two share the list in its
# order; an interrupted run resumes where it stopped when a queue comes back to it. The list is read
# again after every run: lines added later are picked up. Records: results/runs/<config>/seed<S>/. A record
# listed in results/runs/UNTRACED.txt is retrained clean (--force); remove its line when it is committed.
# Each run also measures its losses with dropout off (phm-run --eval-losses: eval_losses.json, for report.fit).
#   scripts/recipe.sh            start both queues in the background (logs: work/logs/recipe-{a,b}.log)
#   scripts/recipe.sh queue      one queue in the foreground
#   scripts/recipe.sh report     results/converged_multi30k_recipe.{md,csv,png,curves.png,parameters.png},
#                                results/converged_multi30k_iwslt_lr_check.*, results/converged_multi30k_iwslt.*,
#                                results/converged_multi30k_iwslt_paired.*, results/width_trend.*, results/fit_multi30k_iwslt.*,
#                                results/converged_multi30k_screen_lr_check.*,
#                                results/frontier_multi30k.*, results/fit_multi30k{,_recipe}.* (each run that has a record),
#                                docs/parameter_stats.png
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=results/runs
LIST=${LIST:-scripts/recipe.list}  # LIST=scripts/frontier.list scripts/recipe.sh: another list

pending() { # the list's runs to do, as "CONFIG SEED [--force]": those without a result.json, and those
  # whose result.json is still the untraced one that results/runs/UNTRACED.txt lists (it names the commit
  # that line gives; a retrained record names its own), to be retrained clean
  grep -v '^\s*\(#\|$\)' "$LIST" | while read -r config seeds; do
    for seed in ${seeds:-1}; do
      folder="${config#configs/}"
      folder="${folder%.yaml}/seed$seed"
      untraced=$(awk -v folder="$folder" '$1 == folder { print $2 }' "$RUNS/UNTRACED.txt" 2>/dev/null)
      if [ ! -f "$RUNS/$folder/result.json" ]; then
        echo "$config $seed"
      elif [ -n "$untraced" ] && grep -qF "\"git_commit\": \"$untraced\"" "$RUNS/$folder/result.json"; then
        echo "$config $seed --force"
      fi
    done
  done
}

queue() {
  while :; do
    progress=0
    while read -r config seed force; do
      if env OMP_NUM_THREADS=1 .venv/bin/phm-run --runs-dir $RUNS --eval-losses "$config" --seeds "$seed" $force; then
        progress=1
        break  # the list may have changed: read it again
      fi
    done < <(pending)
    [ $progress = 1 ] || break  # nothing left that this queue can run
  done
}

case ${1:-start} in
  start)
    mkdir -p work/logs
    nohup "$0" queue >> work/logs/recipe-a.log 2>&1 &
    sleep 60  # the first queue takes the first run's lock before the second looks
    nohup "$0" queue >> work/logs/recipe-b.log 2>&1 &
    echo "started: tail -f work/logs/recipe-{a,b}.log"
    ;;
  queue) queue ;;
  report)
    have() { compgen -G "$RUNS/$1/seed*/result.json" > /dev/null; }  # a run with a record
    collect() { # FOLDER OUT TITLE: phm-collect the runs below RUNS/FOLDER, where any has a record
      compgen -G "$RUNS/$1/*/seed*/result.json" > /dev/null || return 0
      .venv/bin/phm-collect "$RUNS/$1" --out "$2" --title "$3"
    }
    .venv/bin/phm-collect $RUNS/converged/multi30k_recipe --out results/converged_multi30k_recipe \
      --title "Multi30k en-de, the training-recipe screen (PHM at the demo size; seed 1, the leading options and the dense twin on 3): BLEU on test2016, chosen on valid"
    collect converged/multi30k_iwslt_lr_check results/converged_multi30k_iwslt_lr_check \
      "Multi30k en-de, the recipe check at the iwslt size (8 epochs, seed 1): BLEU on test2016, chosen on valid"
    collect converged/multi30k_screen_lr_check results/converged_multi30k_screen_lr_check \
      "Multi30k en-de, the frontier screen's lr check (8 epochs, seed 1; lr 0.008 from each option's converged run): BLEU on test2016, chosen on valid"
    if compgen -G "$RUNS/converged/multi30k_iwslt/transformer/seed*/result.json" > /dev/null; then
      .venv/bin/phm-collect $RUNS/converged/multi30k_iwslt --out results/converged_multi30k_iwslt \
        --title "Multi30k en-de trained to convergence at the iwslt size (hidden 256): BLEU on test2016"
      # the gap to the dense twin at hidden 128 (the converged table) and 256; a series without a run at
      # some width leaves that point out
      .venv/bin/python -m phm_experiments.report.width --out results/width_trend --hidden 128 256 \
        --dense converged/multi30k/transformer converged/multi30k_iwslt/transformer \
        --series "PHM n=2" converged/multi30k/phm_n2_lr008 converged/multi30k_iwslt/phm_n2_lr004 \
        --series "PHM n=4" converged/multi30k/phm_n4_lr008 converged/multi30k_iwslt/phm_n4 \
        --series "PHM n=4, Q, K, V separate, rules from Hamilton's" converged/multi30k_recipe/phm_n4_qkv_separate_algebra_init \
          converged/multi30k_iwslt/phm_n4_qkv_separate_algebra_init \
        --series "dense, PHM n=4's size" converged/multi30k/transformer_equal_params_lr008 \
          converged/multi30k_iwslt/transformer_equal_params \
        --series "quaternion" converged/multi30k/quaternion_lr008 converged/multi30k_iwslt/quaternion
      # each model against the dense twin and the dense model of PHM n=4's size, seed by seed (one machine)
      .venv/bin/python -m phm_experiments.report.paired --out results/converged_multi30k_iwslt_paired \
        --runs converged/multi30k_iwslt --against transformer transformer_equal_params \
        --models transformer_equal_params phm_n4 phm_n2_lr004 quaternion \
        --title "Multi30k en-de at the iwslt size (hidden 256), converged: gaps per seed pair"
      # fit or generalisation at hidden 256: against the band of the two dense sizes
      iwslt=()
      while IFS=$'\t' read -r label run; do
        have "$run" && iwslt+=(--point "$label" "$run")
      done <<'POINTS'
PHM n=2	converged/multi30k_iwslt/phm_n2_lr004
PHM n=4	converged/multi30k_iwslt/phm_n4
quaternion	converged/multi30k_iwslt/quaternion
POINTS
      .venv/bin/python -m phm_experiments.report.fit --out results/fit_multi30k_iwslt \
        --title "Multi30k en-de at the iwslt size (hidden 256): fit or generalisation, against the dense models' losses" \
        --dense converged/multi30k_iwslt/transformer_equal_params converged/multi30k_iwslt/transformer "${iwslt[@]}"
    fi
    # the demo size against the dense frontier (scripts/frontier.list) with the screen's options
    # (scripts/screen.list): a run enters once it has a record
    dense=() points=()
    for run in converged/multi30k/transformer_equal_params_lr008 converged/multi30k_frontier/transformer_h80 \
        converged/multi30k_frontier/transformer_h96 converged/multi30k_frontier/transformer_h112 \
        converged/multi30k/transformer; do
      have $run && dense+=("$run")
    done
    while IFS=$'\t' read -r label run; do
      have "$run" && points+=(--point "$label" "$run")
    done <<'POINTS'
PHM n=2	converged/multi30k/phm_n2_lr008
PHM n=4	converged/multi30k/phm_n4_lr008
PHM n=8	converged/multi30k/phm_n8_lr008
PHM n=16	converged/multi30k/phm_n16_lr008
quaternion	converged/multi30k/quaternion_lr008
PHM n=4, Q, K, V separate	converged/multi30k_recipe/phm_n4_qkv_separate
PHM n=4, Q, K, V separate, rules from Hamilton's	converged/multi30k_recipe/phm_n4_qkv_separate_algebra_init
PHM n=4, Q, K, V separate, + rank 8	converged/multi30k_screen/phm_n4_qkv_separate_lowrank8
PHM n=4, Q, K, V separate, factor norm	converged/multi30k_screen/phm_n4_qkv_separate_factor_norm
PHM n=8, Q, K, V separate, + rank 8	converged/multi30k_screen/phm_n8_qkv_separate_lowrank8
PHM n=4, Q, K, V separate, hidden 64, 7 + 7 layers	converged/multi30k_screen/phm_n4_qkv_separate_h64_deep
PHM n=4, dense attention	converged/multi30k_screen/phm_n4_dense_attention
PHM n=4, dense feed-forward	converged/multi30k_screen/phm_n4_dense_ffn
PHM n=4, feed-forward only, hidden 84	converged/multi30k_screen/phm_n4_dense_attention_h84
every map of rank 20, no sharing	converged/multi30k_screen/lowrank20
dense, hidden 128, 1 + 1 layers, FFN 76	converged/multi30k_screen/transformer_h128_shallow
dense, hidden 64, 1 + 1 layers, FFN 730	converged/multi30k_screen/transformer_h64_shallow
dense, hidden 96, FFN 313	converged/multi30k/transformer_n2_params_lr008
dense, PHM n=4's size, pre-norm	converged/multi30k_screen/transformer_equal_params_prenorm
POINTS
    .venv/bin/python -m phm_experiments.report.frontier --out results/frontier_multi30k \
      --title "Multi30k en-de, demo size: BLEU against parameters without embeddings, the dense frontier (hidden 64-128, FFN 4x) and the PHM-family models" \
      --dense "${dense[@]}" "${points[@]}"
    # the same runs: does each lose on fit or on generalisation (training and validation loss at the best epoch)
    .venv/bin/python -m phm_experiments.report.fit --out results/fit_multi30k \
      --title "Multi30k en-de, demo size: fit or generalisation, each model's losses against the dense frontier's" \
      --dense "${dense[@]}" "${points[@]}"
    # the recipe screen's options (one seed, on the Intel Xeon) against the same dense band
    recipe=()
    for folder in $RUNS/converged/multi30k_recipe/*/; do
      run=${folder#$RUNS/}; run=${run%/}; recipe+=(--point "${run##*/}" "$run")
    done
    .venv/bin/python -m phm_experiments.report.fit --out results/fit_multi30k_recipe \
      --title "Multi30k en-de, demo size: the training-recipe screen's runs against the dense frontier's losses" \
      --dense "${dense[@]}" "${recipe[@]}"
    # the statistics of the dense twin and PHM n=4 as converged, seed 1 alone (docs/training.md)
    .venv/bin/python -m phm_experiments.report.diagnostics $RUNS/converged/multi30k_recipe \
      --rows transformer phm_n4 --seeds 1 --out docs/parameter_stats.png
    ;;
  *) echo "usage: $0 [start|queue|report]" >&2; exit 2 ;;
esac
