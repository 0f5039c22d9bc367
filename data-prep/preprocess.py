"""fairseq-preprocess for several binarizations in one process: torch and fairseq are imported once
(about 4 CPU seconds a start) where the NLI scripts binarize three times (the shared dictionary, the
premises, the hypotheses). Each job is fairseq-preprocess's own command line, after its name:

    python data-prep/preprocess.py NAME ARGS... [--- NAME ARGS...]...

fairseq's log goes to stdout, as fairseq-preprocess's does. A job that fails stops the rest, and the
last line on stderr names it. fairseq adds a DESTDIR/preprocess.log handler at every call: each job's
is removed after it, so that a job's log file holds that job only.
"""

import logging
import sys

JOBS = "---"  # between two jobs


def jobs(argv: list[str]) -> list[tuple[str, list[str]]]:
    """[(name, fairseq-preprocess arguments)] from ``NAME ARGS... --- NAME ARGS...``."""
    found, job = [], []
    for arg in [*argv, JOBS]:
        if arg != JOBS:
            job.append(arg)
        elif job:
            found.append((job[0], job[1:]))
            job = []
    return found


def main(argv: list[str]) -> int:
    from fairseq import options
    from fairseq_cli import preprocess

    log = logging.getLogger("fairseq_cli.preprocess")
    for name, args in jobs(argv):
        handlers = list(log.handlers)
        try:
            preprocess.main(options.get_preprocessing_parser().parse_args(args))
        except (Exception, SystemExit) as error:  # argparse exits; fairseq raises
            if not (isinstance(error, SystemExit) and error.code in (0, None)):
                reason = f"exit status {error.code}" if isinstance(error, SystemExit) else error
                print(f"fairseq-preprocess failed ({name}): {reason}", file=sys.stderr)
                return 1
        finally:
            for handler in set(log.handlers) - set(handlers):
                log.removeHandler(handler)
                handler.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
