"""A measuring process that speaks JSON lines on stdin/stdout: what `suite ab` starts in each checkout.

    python -m suite.run.ab.server    (run with the checkout as working directory)

Plain JSON instead of pickles, so that the driver and a worker from another commit need to agree
only on this protocol, the case key and the row's fields (suite.store.row), not on Python classes:

    → {"settings": {...}, "plugins": [...], "device": "cpu"}
    ← {"ready": pid, "registry": {variant: [impl, ...]}}
    → {"case": {case key}, "replicate": r}      (replicate 0 also counts FLOPs and peak memory)
    ← {"row": {journal line}}
    → null                                      (or end of input: exit)

Everything the kernels, compilers or libraries print goes to the log on stderr, never into the
protocol: stdout is duplicated for the answers first, then fds 1 and 2 both point at stderr.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys


def _answer(stream, payload: dict) -> None:
    stream.write(json.dumps(payload, allow_nan=True) + "\n")
    stream.flush()


def main() -> None:
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # NB: prints of the code under test land in the log, not among the answers
    sys.stdout = sys.stderr
    hello = json.loads(sys.stdin.readline())
    from suite.plan.settings import Settings
    from suite.run.executors import worker

    known = {f.name for f in dataclasses.fields(Settings)}
    dropped = sorted(set(hello["settings"]) - known)
    if dropped:  # NB: a driver newer than this checkout: its new settings are not this code's to apply
        print(f"serve: settings this checkout does not know, ignored: {', '.join(dropped)}", file=sys.stderr)
    settings = Settings.from_plan({k: v for k, v in hello["settings"].items() if k in known})
    worker.setup(settings, list(hello.get("plugins", [])), hello["device"])
    import variants
    from suite.plan.case import Case

    registry = {name: sorted(variants.get(name).impls) for name in variants.names()}
    _answer(answers, {"ready": os.getpid(), "registry": registry})
    for line in sys.stdin:
        message = json.loads(line)
        if message is None:
            return
        row = worker.measure_case(Case.from_key(message["case"]), int(message["replicate"]), settings)
        _answer(answers, {"row": row.to_json()})


if __name__ == "__main__":
    main()
