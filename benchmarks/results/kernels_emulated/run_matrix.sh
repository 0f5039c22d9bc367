#!/bin/bash
# Usage: run_matrix.sh OUTDIR ; runs hashes.py natively and under qemu-x86_64 with several CPU models.
OUT=${1:-work/kernels_emulated}; mkdir -p "$OUT"
PY=.venv/bin/python3.11
S=benchmarks/results/kernels_emulated/hashes.py
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 ATEN_CPU_CAPABILITY=avx2
for cpu in ${CPUS:-native Haswell EPYC-Milan Skylake-Client EPYC}; do
  for cb in ${CBWRS:-default AVX2,STRICT COMPATIBLE AVX2}; do
    if [ "$cb" = default ]; then unset MKL_CBWR; else export MKL_CBWR=$cb; fi
    if [ "$cpu" = native ]; then RUN="$PY"; else RUN="qemu-x86_64 -cpu $cpu $PY"; fi
    f="$OUT/${cpu}_${cb/,/_}"
    nice -n 19 $RUN $S > "$f.txt" 2> "$f.err"
    MKL_VERBOSE=1 nice -n 19 $RUN $S mm_odd_37x200@200x77 gemv_512x128@128 > "$f.verbose" 2>&1
    echo "done $cpu $cb $(date +%T)"
  done
done
