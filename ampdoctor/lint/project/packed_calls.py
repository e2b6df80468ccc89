"""A module summary's call records as the lint pass's workers send them to the main process:
pickled in one string of bytes, beside the few made inside an autocast region.

The project checks read a module's call records for two things: the calls made inside an
autocast region, in every module they judge (AMP101's backward in a callee, the float16 reach
of AMP301 and AMP105), and the calls that name a function they ask about
(``Project.calls_naming``), in a few modules. The rest of the records are never read: on the
31-repository tree (623 summarized modules) the main process looked through the calls of 26
modules, the forked one of none. Sent as Python objects, the records were 420,000 of the
summaries' 1.03 million objects; packed, the main process's peak resident memory fell from
141-144 to 129-131 MB (``/usr/bin/time``) and the run took 7-12% less time (alternating series
of 5 and 7), the findings byte-identical.

A packed summary holds ``packed_calls`` and ``region_calls`` in place of ``calls``; ``calls``
and ``region_calls`` below read either form, and ``unpacked`` gives the summary as the lint
pass made it (what the cache stores and the run in one process sees).
"""

from __future__ import annotations

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from .shapes import CallRecord, ModuleSummary


def packed(summary: ModuleSummary) -> ModuleSummary:
    """The summary to send: its call records pickled, those inside an autocast region kept
    beside them, in the place ``calls`` held (a summary without calls is sent as it is)."""
    if not summary.get("calls"):
        return summary
    import pickle  # (only in a worker that sends summaries: a run in one process never loads it)

    out: ModuleSummary = {}
    for key, value in summary.items():
        if key == "calls":
            records: list[CallRecord] = value  # type: ignore[assignment]  # (the "calls" key)
            out["packed_calls"] = pickle.dumps(records, protocol=pickle.HIGHEST_PROTOCOL)
            out["region_calls"] = [call for call in records if "region" in call]
        else:
            out[key] = value  # type: ignore[literal-required]  # (a key of the same TypedDict)
    return out


def unpacked(summary: ModuleSummary) -> ModuleSummary:
    """The summary with its call records in ``calls``, in their place (a new dict where it was
    packed, else the summary itself)."""
    if "packed_calls" not in summary:
        return summary
    import pickle

    out: ModuleSummary = {}
    for key, value in summary.items():
        if key == "packed_calls":
            out["calls"] = pickle.loads(value)  # type: ignore[arg-type]  # (the "packed_calls" key)
        elif key != "region_calls":
            out[key] = value  # type: ignore[literal-required]  # (a key of the same TypedDict)
    return out


def calls(summary: ModuleSummary) -> list[CallRecord]:
    """The summary's call records, unpacked in place the first time they are asked for."""
    if "packed_calls" in summary:
        whole = unpacked(summary)
        summary.clear()  # type: ignore[attr-defined]  # (a dict at run time; kept where it is held)
        summary.update(whole)
    return summary.get("calls", [])


def region_calls(summary: ModuleSummary) -> list[CallRecord]:
    """The summary's call records made inside an autocast region, in source order."""
    if "region_calls" in summary:
        return summary["region_calls"]
    return [call for call in summary.get("calls", []) if "region" in call]
