"""Rule logging: everything a rule prints (its own, its engine subprocesses') goes to the
rule's `log:` file; a failure ends with one line on the terminal naming the problem and fix."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import traceback
from pathlib import Path

from infbench.core.errors import UserError


@contextlib.contextmanager
def rule_logging(log_path: str | os.PathLike, signalled: list[int] | None = None):
    """`signalled`: the stop signals received while the rule ran; a failure after one is the
    interrupt's, whatever it raised."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    terminal = os.dup(2)
    sys.stdout.flush()
    sys.stderr.flush()
    with open(log_path, "w", buffering=1) as log:
        # Redirect the file descriptors, not only sys.stdout: vLLM's engine and tqdm write
        # from C code and child processes, which inherit fds 1 and 2.
        saved = os.dup(1), os.dup(2)
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", force=True)
        for chatty in ("httpx", "httpx2", "openai"):  # one line per HTTP request
            logging.getLogger(chatty).setLevel(logging.WARNING)
        try:
            yield
        except BaseException as error:
            traceback.print_exc()
            interrupted = isinstance(error, KeyboardInterrupt) or bool(signalled)
            if isinstance(error, UserError):
                line = f"error: {error}"
            elif interrupted:
                line = "interrupted; partial outputs were removed, rerun the same command to continue"
            else:
                line = f"error: {type(error).__name__}: {error} (unexpected; full traceback in {log_path})"
            os.write(terminal, (line + "\n").encode())
            if isinstance(error, UserError) or interrupted:
                raise SystemExit(1) from None
            raise
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            os.close(terminal)
