"""The cuda_tests part: pytest -m cuda tests/test_gpu_cuda.py (the dry run: on the CPU), counted from its
JUnit report. On the GPU a skipped test fails the part: there, every one must run."""

import xml.etree.ElementTree as ElementTree
from pathlib import Path

from .context import Context


def run(ctx: Context, deadline: float) -> dict:
    junit = ctx.work / "cuda_tests.xml"
    junit.unlink(missing_ok=True)
    env = {**ctx.env, **({"PHM_CUDA_TESTS_ON_CPU": "1"} if not ctx.mode.gpu else {})}
    command = [ctx.python, "-m", "pytest", "-q", "-m", "cuda", "tests/test_gpu_cuda.py", "-p", "no:cacheprovider"]
    code = ctx.processes.run([*command, "--junitxml", junit], ctx.log("cuda_tests"), deadline, env=env)
    results = junit_results(junit)
    bad = results["failed"] or results["errors"] or not results["passed"] or code
    if ctx.mode.gpu and results["skipped"]:
        bad = True
    return {**results, "exit_code": code, "status": "failed" if bad else "ok"}


def junit_results(path: Path) -> dict:
    if not path.exists():
        return {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "failures": ["no test report written"]}
    root = ElementTree.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    failures = []
    for case in suite.iter("testcase"):
        for problem in (*case.findall("failure"), *case.findall("error")):
            message = (problem.get("message") or "").split("\n")[0][:300]
            failures.append(f"{case.get('name')}: {message}")
    return {
        "passed": counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"],
        "failed": counts["failures"],
        "errors": counts["errors"],
        "skipped": counts["skipped"],
        "failures": failures,
    }
