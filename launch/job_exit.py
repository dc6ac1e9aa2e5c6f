"""How a conversion subcommand turns its outcome into an exit code (shared by convert, pcr).

0 success; 1 the job failed while running (a worker died, a runner error); 2 bad
options; 3 more rejects than ``--max-rejects``; 4 output exists (use ``--overwrite`` or
``--resume``).  Each failure prints one ``tar2tf <command>: <reason>`` line on stderr.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional, Tuple


def run_job(command: str, job: Callable[[], Any]) -> Tuple[Optional[Any], int]:
    """``(job(), 0)``, or ``(None, exit code)`` for the failures a user can act on."""
    from pipelines.job.config import OutputExistsError
    try:
        return job(), 0
    except OutputExistsError as e:
        code, why = 4, e
    except (ValueError, ImportError) as e:  # ImportError: a module:function named in --ops
        code, why = 2, e
    except RuntimeError as e:
        code, why = 1, e
    print(f"tar2tf {command}: {why}", file=sys.stderr)
    return None, code


def rejects_exit(command: str, res, max_rejects: int) -> int:
    """The result's exit code, saying why when it is 3 (too many rejects)."""
    count = res.manifest["rejects"]["count"]
    if res.exit_code == 3 and count <= max_rejects:
        print(f"tar2tf {command}: nothing written: every record read was rejected ({count} rejects)",
              file=sys.stderr)
    elif res.exit_code == 3:
        print(f"tar2tf {command}: {count} rejects > --max-rejects {max_rejects}", file=sys.stderr)
    return res.exit_code
