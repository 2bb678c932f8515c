"""The doctor's child process: imports torch, then (argument "load") torch_segops, whose library the doctor
points it at, and runs one op; one JSON line per stage, so that whatever kills a process (a damaged library, a
broken torch) kills this one and the doctor names the stage. Run by probes.probe_in_child as ``python -c``."""

import json
import os
import sys


def say(**kw):
    print(json.dumps(kw, default=repr), flush=True)


def failure(e):
    return {"error": f"{type(e).__name__}: {e}".strip(), **({"exit": e.code} if isinstance(e, SystemExit) else {})}


def main() -> None:
    say(stage="torch")
    try:
        import torch
    except BaseException as e:  # a broken torch can raise anything, even SystemExit
        say(torch=failure(e))
        return
    where = os.path.dirname(torch.__file__) if getattr(torch, "__file__", None) else next(iter(getattr(torch, "__path__", [])), "?")
    t = {"version": str(getattr(torch, "__version__", "?")), "path": where}
    try:
        t["cuda"] = torch.version.cuda
        if torch.tensor([1.0, 2.0]).sum().item() != 3.0:
            raise RuntimeError("torch.tensor([1.0, 2.0]).sum() is not 3")
    except BaseException as e:  # a stub or a half-installed torch
        t["error"] = failure(e)["error"]
    if t.get("cuda") and "error" not in t:
        try:
            t["cuda_available"] = bool(torch.cuda.is_available())
            n = torch.cuda.device_count() if t["cuda_available"] else 0
            t["gpus"] = [[i, torch.cuda.get_device_name(i), list(torch.cuda.get_device_capability(i))] for i in range(n)]
        except Exception as e:
            t["cuda_available"], t["cuda_error"] = False, failure(e)["error"]
    say(torch=t)
    if "error" in t or sys.argv[1:2] != ["load"]:
        return
    say(stage="library")
    sys.path.append(sys.argv[2])  # the doctor's own package, when nothing earlier on the path holds torch_segops
    try:
        import torch_segops

        say(library=torch_segops.build_info())
    except BaseException as e:
        say(library=failure(e))
        return
    say(stage="op")
    try:
        got = torch_segops.segment_csr(torch.tensor([[1.0], [2.0], [4.0]]), torch.tensor([0, 1, 3])).tolist()
        say(op=None if got == [[1.0], [6.0]] else f"segment_csr summed the rows [1], [2, 4] to {got}, not [[1.0], [6.0]]")
    except BaseException as e:
        say(op=f"segment_csr on the CPU raised {failure(e)['error']}")


if __name__ == "__main__":
    main()
