"""Runs configs into RUNS, each run step by step: prepare, train (or keep the training of an earlier
record of the same fingerprint), evaluate, record -> result.json.

What a run's folder shows done already is not done again: a run whose result.json has the config's
every value is done; checkpoints of the same fingerprint are resumed, a finished training is only
evaluated again; checkpoints of another fingerprint are refused (resume.py). The folder's layout and
its lock are run_folder.py's; each step takes the run (run.py): its config, folder and placeholders.
"""

from pathlib import Path
from typing import Optional

from . import data, eval_losses, evaluation, training
from .checks import check_model
from .commands import CommandFailed
from .provenance import code_state, environment  # at load, like results: a queue started before an edit keeps its pair
from .results import Environment, ModuleParameters, Parameters, Result, Teacher, portable_path
from .resume import (
    keep_the_code_of_the_training,
    previous_result,
    refuse_checkpoints_of_another_config,
    refuse_record_without_checkpoints,
)
from .run import Run


class Runner:
    """Runs configs into RUNS; a config's teacher is run first (same seed) when it is not done."""

    def __init__(self, runs_dir: Path, force: bool = False, eval_losses: bool = False):
        self.runs_dir = Path(portable_path(runs_dir))  # every path of the runs' records below it
        self.force = force
        self.eval_losses = eval_losses  # each run carried out also measures its losses with dropout off
        self.done = {}  # (config path, seed) -> Result, in this process

    def run(self, config, seed=None, force=None) -> Result:
        return self._run(Run.of(config.with_seed(seed), self.runs_dir), self.force if force is None else force)

    def _run(self, run: Run, force: bool) -> Result:
        key = run.config.path, run.config.seed
        if key not in self.done:
            if run.teacher:
                run.say(f"its teacher {run.teacher.name} (seed {run.config.seed}) first")
                self._run(run.teacher, force=False)
            # a finished run is reported without its lock: it writes nothing (a --runs-dir may be read-only)
            finished = None if force else done_already(run)
            if finished:
                self.done[key] = finished
            else:
                with run.folder.lock():
                    self.done[key] = carry_out(run, force)
                    if self.eval_losses:
                        measure_eval_losses(run)
        return self.done[key]


def done_already(run: Run) -> Result | None:
    """The run's result.json where it has every value of the run's config (result.json is written whole)."""
    previous = previous_result(run)
    if previous and previous.config_sha256 == run.config.sha256:
        run.say(f"done already ({run.folder.result})")
        return previous
    return None


def carry_out(run: Run, force: bool) -> Result:
    """One run, step by step; what its folder shows done already is not done again."""
    if force:
        removed = run.folder.clean(also=[Path(run.fill(run.config.init.checkpoint))] if run.config.init else [])
        if removed:
            run.say(f"--force: removed {len(removed)} files of {run.folder.path}")
    finished = done_already(run)  # by another phm-run since _run looked, without the lock
    if finished:
        return finished
    code = code_state()  # the code the run starts from, whatever the checkout becomes while it trains
    previous = previous_result(run)
    same_training = previous is not None and previous.fingerprint == run.fingerprint.sha256
    if same_training:
        refuse_record_without_checkpoints(run, previous)
    refuse_checkpoints_of_another_config(run)
    if not same_training:
        keep_the_code_of_the_training(run, code)
    run.folder.path.mkdir(parents=True, exist_ok=True)
    prepared = data.prepare(run)
    if prepared:  # the configs were checked before their data was there: the model is checked against it now
        check_model(run.config, run.fields)
    trained = training.trained_already(run, previous) if same_training else training.train(run)
    evaluated = evaluation.evaluate(run, trained.init)
    result = record(run, prepared, trained, evaluated, code, trained_in=previous.environment if same_training else None)
    result.write(run.folder.result)
    run.say(f"{evaluated.summary()} -> {run.folder.result}")
    return result


def measure_eval_losses(run: Run) -> None:
    """The finished run's losses with dropout off (eval_losses.py). Its record is written already: a failure
    here is reported, not raised, and the measurement can be made again by itself."""
    try:
        eval_losses.write(run.folder.path)
    except (eval_losses.EvalLossesError, CommandFailed) as error:
        run.say(f"losses with dropout off not measured ({error}); python -m phm_experiments.eval_losses measures it")


def record(run: Run, prepared, trained: training.Trained, evaluated: evaluation.Evaluated, code: dict,
           trained_in: Optional[Environment] = None) -> Result:  # fmt: skip
    """The run's result.json: the steps' records, with the trained model's parameter counts and the
    environment; ``code``: provenance.code_state() as the run started. ``trained_in``: the environment of
    the earlier record whose training this run only evaluated again, which the record keeps as its own (the
    commit, machine and kernels that trained it), with this run's as ``evaluated_in``."""
    config = run.config
    here = Environment(**environment(code=code))
    return Result(
        config=portable_path(config.path),
        config_sha256=config.sha256,
        description=config.description,
        paper=config.paper.model_dump(exclude_none=True),
        seed=config.seed,
        arch=config.arch,
        prepare_command=prepared,
        parameters=count_parameters_of(run.folder.best, config.count_module),
        environment=trained_in or here,
        evaluated_in=here if trained_in else None,
        fingerprint=run.fingerprint.sha256,
        config_values=config.values,
        teacher=teacher_record(run.teacher) if run.teacher else None,
        **vars(trained),
        **vars(evaluated),
    )


def teacher_record(teacher: Run) -> Teacher:
    path, fingerprint = portable_path(teacher.config.path), teacher.fingerprint.sha256
    return Teacher(config=path, run=str(teacher.folder.path), fingerprint=fingerprint)


def count_parameters_of(checkpoint: Path, module=None) -> Parameters:
    """Counts of the trained model (see phm_layers.count_parameters), and of one of its
    submodules when ``module`` names one (Table 1 counts the LSTM encoder, Table 5 the layers)."""
    from fairseq import checkpoint_utils

    import phm_fairseq  # noqa: F401  (registers the models the checkpoint names)
    from phm_layers import count_parameters

    models, _cfg, _task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)])
    counted = ModuleParameters.of(count_parameters(models[0].get_submodule(module)), name=module) if module else None
    return Parameters.of(count_parameters(models[0]), module=counted)
