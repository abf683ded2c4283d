"""One process that runs many ``dqkm`` command lines, for tests/test_cli.py.

Each ``python -m dqkm`` started anew pays the imports of dask, distributed, numba and
dqkm and the loading of dqkm's cached kernels (several CPU seconds).  This process
pays them once: it reads one JSON list of arguments per line on stdin, runs
``dqkm.cli.main`` on them with file descriptors 1 and 2 redirected to files (so that
everything the command, its libraries and any process it starts print is captured, as
it is from a subprocess), and answers one JSON line ``{"rc", "out", "err"}`` on its
own stdout.  The exit status is the one ``python -m dqkm`` gives: ``main``'s return
value, a ``SystemExit``'s code (argparse), or 1 with the traceback on stderr for an
exception that escapes ``main``.  Before each command the root logger is reset, as in
a fresh process (``main`` configures it with ``logging.basicConfig``).
"""

import json
import logging
import os
import sys
import tempfile
import traceback


def _run(argv):
    from dqkm.cli import main

    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:  # what the interpreter does with an uncaught exception
        traceback.print_exc()
        rc = 1
    return 0 if rc is None else rc


def serve():
    answer = os.fdopen(os.dup(1), "w")  # the pipe to the test, apart from fd 1
    with tempfile.TemporaryDirectory() as tmp:
        files = [os.path.join(tmp, name) for name in ("out", "err")]
        for line in sys.stdin:
            argv = json.loads(line)
            sys.stdout.flush()
            sys.stderr.flush()
            saved = [os.dup(1), os.dup(2)]
            for fd, path in zip((1, 2), files):
                target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.dup2(target, fd)
                os.close(target)
            try:
                rc = _run(argv)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                for fd, old in zip((1, 2), saved):
                    os.dup2(old, fd)
                    os.close(old)
            out, err = (open(path, encoding="utf-8", errors="replace").read() for path in files)
            answer.write(json.dumps({"rc": rc, "out": out, "err": err}) + "\n")
            answer.flush()


if __name__ == "__main__":
    serve()
