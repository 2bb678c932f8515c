"""The doctor's child process: imports torch, then (argument "load") torch_segops, whose library the doctor points
it at, and runs one op. Each stage ends with one JSON line of Facts fields, so that whatever kills a process (a
damaged library, a broken torch) kills this one and the doctor names the stage. Run by probes.probe_in_child."""

import json
import os
import sys


def say(stage: str, **facts) -> None:
    print(json.dumps({"stage": stage, **facts}, default=repr), flush=True)


def failure(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".strip()


def main() -> None:
    try:
        import torch
    except BaseException as e:  # a broken torch can raise anything, even SystemExit
        return say("torch", torch_error=failure(e), **({"torch_exit": e.code} if isinstance(e, SystemExit) else {}))
    path = os.path.dirname(torch.__file__) if getattr(torch, "__file__", None) else next(iter(getattr(torch, "__path__", [])), "?")
    try:  # a stub (a stray folder named torch) or a half-installed torch imports, then fails here
        t = {"torch_path": path, "torch_cuda_version": torch.version.cuda, "torch_version": str(torch.__version__)}
        if torch.tensor([1.0, 2.0]).sum().item() != 3.0:
            raise RuntimeError("torch.tensor([1.0, 2.0]).sum() is not 3")
    except BaseException as e:
        return say("torch", torch_path=path, torch_error=failure(e))
    if t["torch_cuda_version"]:
        try:
            t["torch_cuda_available"] = bool(torch.cuda.is_available())
            n = torch.cuda.device_count() if t["torch_cuda_available"] else 0
            t["torch_gpus"] = [[i, torch.cuda.get_device_name(i), list(torch.cuda.get_device_capability(i))] for i in range(n)]
        except Exception as e:
            t["torch_cuda_available"], t["torch_cuda_error"] = False, failure(e)
    say("torch", **t)
    if sys.argv[1:2] != ["load"]:
        return
    sys.path.append(sys.argv[2])  # the doctor's own package, when nothing earlier on the path holds torch_segops
    try:
        import torch_segops

        say("library", build_info=torch_segops.build_info(), build_info_source="loaded")
    except BaseException as e:
        return say("library", library_error=failure(e))
    try:
        got = torch_segops.segment_csr(torch.tensor([[1.0], [2.0], [4.0]]), torch.tensor([0, 1, 3])).tolist()
        say("op", library_error=None if got == [[1.0], [6.0]] else f"segment_csr summed the rows [1], [2, 4] to {got}")
    except BaseException as e:
        say("op", library_error=f"segment_csr on the CPU raised {failure(e)}")


if __name__ == "__main__":
    main()
