"""The CPU kernels of a run, pinned so that the same command gives the same bits on another x86 CPU.

Three libraries pick their kernels per CPU, and a kernel fixes the order in which a sum is taken:
ATen's vectorised ops (softmax, layer norm, reductions, Adam's steps) run 16-lane AVX-512 code on a
CPU that has it and 8-lane AVX2 code elsewhere; MKL's sgemm (every Linear and bmm) takes a branch per
CPU family; oneDNN JIT-compiles for the best instruction set it finds. Each reads an environment
variable at its first use, so the pins are set in the environment of the commands phm-run starts
(commands.environment), never in a process that has already loaded torch. Threads are pinned too:
parallel reductions split their work by the thread count.

    eval "$(python -m phm_experiments.kernels)"    # the same pins for a plain fairseq-train

A variable already set in the environment is kept (the user's choice, e.g. MKL_CBWR=COMPATIBLE);
every run records the values its commands had (result.json: environment.kernels).
"""

import os
import shlex

# AVX2 is what every x86 CPU this project trains on has (Intel Xeon with AVX-512 and AMX; AMD EPYC
# with and without AVX-512). MKL_CBWR: MKL's conditional numerical reproducibility, the AVX2 branch,
# STRICT also for the functions that are otherwise only reproducible on aligned data.
PINNED = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "AVX2,STRICT",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    # read by the training launcher (fairseq_train.py): torch.use_deterministic_algorithms
    "PHM_DETERMINISTIC_ALGORITHMS": "1",
}
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
# Not pinned by default, recorded where set: PHM_EXACT_SQRT=1 makes the training launcher take float32
# square roots in float64 (exact_sqrt), for the trial of MKL_CBWR=COMPATIBLE across Intel and AMD
# (docs/reproducibility.md)
OPTIONAL = ("PHM_EXACT_SQRT",)


def pinned_environment(threads: int, environ=None) -> dict:
    """The variables that pin a command's kernels: PINNED and ``threads`` threads, each unless
    ``environ`` (os.environ) sets it already."""
    environ = os.environ if environ is None else environ
    wanted = {**PINNED, **dict.fromkeys(THREAD_VARIABLES, str(threads))}
    return {name: environ.get(name, value) for name, value in wanted.items()}


def kernel_environment(environ) -> dict:
    """What of ``environ`` chooses kernels, as a record stores it (the variables PINNED names and the
    thread counts, those that are set)."""
    return {name: environ[name] for name in (*PINNED, *THREAD_VARIABLES, *OPTIONAL) if name in environ}


def exact_sqrt() -> None:
    """float32 square roots (Adam's denominator: Tensor.sqrt) computed in float64 and rounded back: correctly
    rounded on every CPU. MKL's VML, which takes torch's float32 sqrt, starts from the rsqrtps approximation,
    whose tables differ between Intel and AMD silicon, even in MKL_CBWR=COMPATIBLE."""
    import torch

    def through_float64(sqrt):
        def exact(tensor, *args, **kwargs):
            if isinstance(tensor, torch.Tensor) and tensor.dtype == torch.float32 and not args and not kwargs:
                return sqrt(tensor.double()).float()
            return sqrt(tensor, *args, **kwargs)

        return exact

    torch.Tensor.sqrt = through_float64(torch.Tensor.sqrt)
    torch.sqrt = through_float64(torch.sqrt)


def main() -> None:
    import torch

    # the threads torch takes here (OMP_NUM_THREADS, or one per core) unless a pin is set already
    print("export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in pinned_environment(torch.get_num_threads()).items()))


if __name__ == "__main__":
    main()
