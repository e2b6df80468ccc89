"""AMP211 for checkpoints that are not written as a plain mapping: a dataclass or ``NamedTuple``
snapshot whose fields cannot hold the scaler's state, and a mapping whose optimizer states come
from a helper that keeps only ``torch.optim.Optimizer`` objects while the GradScaler lives in
another object (see ``snapshots.py`` for what the summaries hold).

Each check yields AMP211 reports; ``checks.py`` runs them.
"""

from __future__ import annotations

from collections.abc import Iterator

from .link import Project
from .reports import RESUME, CrossReport

# ---------------------------------------------------------------------------------------
# Snapshots of record classes
# ---------------------------------------------------------------------------------------


def snapshot_checkpoints(project: Project, targets: list[str]) -> Iterator[CrossReport]:
    for module in targets:
        summary = project.summary(module) or {}
        for save in summary.get("snapshots", []):
            resolved = project.resolve_spelled(module, save["class"].split("."))
            if resolved is None or resolved[2] != "class":
                continue
            other, class_name, _kind = resolved
            info = (project.summary(other) or {}).get("classes", {}).get(class_name, {})
            record = info.get("record")
            if record is None or not _without_scaler(record, save["args"]):
                continue
            short = class_name.rsplit(".", 1)[-1]
            yield CrossReport(
                "AMP211",
                module,
                save["at"],
                f"checkpoint saves `{short}`, whose fields hold the optimizer's state but not the GradScaler's: "
                + RESUME,
                f"Add a field for `scaler.state_dict()` to `{short}`, fill it when saving, and call "
                "`scaler.load_state_dict(...)` on resume",
                [
                    (other, info["at"], f"`{short}` has no field that can hold the scaler's state"),
                    (module, save["reach"], "the GradScaler whose state is left out"),
                ],
            )


def _without_scaler(record: dict, args: list[dict]) -> bool:
    """Whether a construction of the record class with ``args`` holds an optimizer's state and
    certainly nothing of the scaler's: every field is given a value known not to carry it, or
    keeps a literal default."""
    if record.get("scaler"):
        return False
    fields = record["fields"]
    names = [name for name, _default in fields]
    kinds: dict[str, str] = {}
    for arg in args:
        if "kw" in arg:
            if arg["kw"] not in names or arg["kw"] in kinds:
                return False
            kinds[arg["kw"]] = arg["kind"]
        else:
            if arg["pos"] >= len(names):
                return False
            kinds[names[arg["pos"]]] = arg["kind"]
    for name, default in fields:
        if name not in kinds and default != "const":
            return False  # required (the call is not understood) or a default that may hold state
    values = set(kinds.values())
    return "optim" in values and values <= {"optim", "plain"}


# ---------------------------------------------------------------------------------------
# Optimizer states collected by type, the scaler held elsewhere
# ---------------------------------------------------------------------------------------


def collected_checkpoints(project: Project, targets: list[str]) -> Iterator[CrossReport]:
    for module in targets:
        summary = project.summary(module) or {}
        for name, function in summary.get("functions", {}).items():
            if "." not in name or function.get("scaler") or function.get("star"):
                continue
            for save in function.get("saves", []):
                taken = save.get("collect")
                if taken is None:
                    continue
                found = _collected_report(project, module, name, save, taken)
                if found is not None:
                    yield found
                    break


def _collected_report(project: Project, module: str, name: str, save: dict, taken: dict) -> CrossReport | None:
    kinds = taken["kinds"]
    if "scaler" in kinds or "opaque" in kinds:
        return None
    collector = None
    for call in taken["calls"]:
        target = project.resolve_call(module, {**call, "frame": name})
        if target is None or "collects" not in target.function:
            return None  # a call that may hold anything
        if target.skip == 0 and (target.arg_for(call, target.function["collects"]) or {}).get("name") != "self":
            return None
        if target.skip == 1 and target.function["collects"] != 0:
            return None
        collector = collector or target
    if collector is None:
        return None
    class_name = name.split(".", 1)[0]
    scaler = _held_scaler(project, module, class_name)
    if scaler is None:
        return None
    holder, where, at = scaler
    if any(state == holder or state.startswith(holder + ".") for state in taken["states"]):
        return None  # the object that holds the scaler is saved some other way
    short = collector.name.rsplit(".", 1)[-1]
    return CrossReport(
        "AMP211",
        module,
        save["at"],
        f"checkpoint saves the optimizers' state that `{short}` collects (only `torch.optim.Optimizer` objects) "
        f"but not the GradScaler held by `{holder}`: " + RESUME,
        f"Save `{holder}`'s GradScaler state with the checkpoint and restore it with `load_state_dict(...)` on resume",
        [
            (collector.module, collector.function["at"], f"`{short}` keeps only the optimizers; the scaler is not one"),
            (where, at, "the GradScaler whose state is left out"),
        ],
    )


def _held_scaler(project: Project, module: str, class_name: str) -> tuple[str, str, list[int]] | None:
    """The GradScaler that objects of ``class_name`` train with: one it builds into ``self.x``
    itself, or one built by the class of an attribute it binds once (``self.amp = AmpStep()``),
    when that class is not an optimizer (the collector would keep it). ``(holder, module, at)``."""
    summary = project.summary(module) or {}
    own = summary.get("classes", {}).get(class_name, {}).get("scaler_attr")
    if own is not None:
        return own["name"], module, own["at"]
    prefix = f"{class_name}.self."
    for key, spelled in sorted(summary.get("instances", {}).items()):
        if not key.startswith(prefix) or key.count(".") != 2:
            continue
        resolved = project.resolve_spelled(module, spelled.split("."))
        if resolved is None or resolved[2] != "class":
            continue
        info = (project.summary(resolved[0]) or {}).get("classes", {}).get(resolved[1], {})
        if "scaler_attr" not in info or any("optim" in base.lower() for base in info.get("bases", [])):
            continue
        return "self." + key[len(prefix) :], resolved[0], info["scaler_attr"]["at"]
    return None
