"""The install part: the wheels of scripts/gpu/wheels.txt that the machine's Python cannot import, installed
offline into WORK/site (the dry run only checks that .venv imports them), then the plugin and the kit
imported by that Python and the versions read (phm_experiments.provenance, as every run record has them)."""

import importlib.util
import json
import re
import shutil
from pathlib import Path

from .context import Context
from .paths import GPU

# run by the machine's Python with WORK/site and the checkout on its path: what phm-run records of a run's
# environment, and the device's
VERSIONS = """
import json, numpy, sacrebleu, torch
from phm_experiments.provenance import environment
cuda = torch.cuda.is_available()
recorded = environment("cuda" if cuda else "cpu")
print(json.dumps({
    **{key: recorded[key] for key in ("python", "torch", "fairseq", "phm_fairseq", "device", "cpu_capability")},
    "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version() if cuda else None, "cuda_available": cuda,
    "capability": ".".join(map(str, torch.cuda.get_device_capability())) if cuda else None,
    "bf16_supported": torch.cuda.is_bf16_supported() if cuda else None,
    "numpy": numpy.__version__, "sacrebleu": sacrebleu.__version__, "fairseq_from": __import__("fairseq").__file__,
}))
"""


def run(ctx: Context, deadline: float) -> dict:
    entries = read_wheel_list()
    missing = [e for e in entries if e["module"] != "pip" and importlib.util.find_spec(e["module"]) is None]
    details = {"wheels_listed": len(entries), "missing_here": [e["requirement"] for e in missing]}
    ctx.report.update("install", **details)
    if not ctx.mode.gpu:
        if missing:
            raise RuntimeError(
                f"{', '.join(e['module'] for e in missing)}: not importable by {ctx.python}, "
                "though scripts/gpu/wheels.txt lists them: run `make install`, or correct wheels.txt"
            )
    elif missing:
        details["installed"] = install_wheels(ctx, missing, deadline)
    log = ctx.log("install")
    if ctx.processes.run([ctx.python, "-c", VERSIONS], log, deadline):
        raise RuntimeError(f"import fairseq, phm_fairseq, phm_experiments failed: {last_line(log)}")
    versions = json.loads(last_line(log))
    ctx.report.update(versions=versions)
    details["versions"] = versions
    if ctx.mode.gpu and not versions["cuda_available"]:
        details.update(status="failed", error="torch sees no GPU: the CUDA parts cannot run")
    return details


def install_wheels(ctx: Context, missing: list, deadline: float) -> list:
    """pip install --no-index --no-deps --target WORK/site of the wheels of ``missing``; not again where an
    earlier run on this machine installed the same."""
    files = []
    for entry in missing:
        found = sorted(ctx.wheels.glob(f"{wheel_name(entry['name'])}-{entry['version']}-*.whl"))
        if not found:
            raise RuntimeError(
                f"{entry['requirement']}: the machine lacks {entry['module']} and {ctx.wheels} has no wheel of it "
                "(run scripts/gpu/wheels.sh here, and carry scripts/gpu/wheels to the GPU)"
            )
        files.append(found[-1])
    names = sorted(f.name for f in files)
    marker = ctx.site / ".installed.json"
    if marker.exists() and json.loads(marker.read_text()) == names:
        return names  # a warm machine, installed by an earlier run
    shutil.rmtree(ctx.site, ignore_errors=True)
    command = [*pip(ctx), "install", "--no-index", "--no-deps", "--disable-pip-version-check"]
    command += ["--no-warn-script-location", "--target", str(ctx.site), *map(str, files)]
    if ctx.processes.run(command, ctx.log("install"), deadline):
        raise RuntimeError(f"pip install failed (see {ctx.log('install').name})")
    marker.write_text(json.dumps(names))
    return names


def pip(ctx: Context) -> list:
    """pip as a command: the machine's, or run from its own wheel."""
    if importlib.util.find_spec("pip") is not None:
        return [ctx.python, "-m", "pip"]
    wheel = sorted(ctx.wheels.glob("pip-*.whl"))
    if not wheel:
        raise RuntimeError(f"{ctx.python} has no pip, and {ctx.wheels} no pip wheel to run it from")
    return [ctx.python, str(wheel[-1] / "pip")]


def read_wheel_list() -> list:
    """scripts/gpu/wheels.txt: each requirement with its module and how wheels.sh gets it."""
    entries = []
    for line in (GPU / "wheels.txt").read_text().splitlines():
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        requirement, module, how = fields
        name, version = requirement.split("==")
        entries.append({"requirement": requirement, "name": name, "version": version, "module": module, "how": how})
    return entries


def wheel_name(distribution: str) -> str:
    """A distribution's name as wheel files spell it (PEP 427: runs of - _ . become _)."""
    return re.sub(r"[-_.]+", "_", distribution).lower()


def last_line(log: Path) -> str:
    return log.read_text(encoding="utf-8").rstrip("\n").rsplit("\n", 1)[-1]
