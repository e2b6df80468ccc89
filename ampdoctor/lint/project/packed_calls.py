"""A module summary's call records as the lint pass's workers send them to the main process:
pickled, beside the little of them that the project checks read of every module.

Two kinds of call records make up most of a summary: the module's calls that may land in
project code (``calls``: 420,000 of the 1.03 million objects of the 623 summaries of the
31-repository tree) and each function's calls in its value flow (``flows[name]["calls"]``:
36 MB as objects). The checks read a module's ``calls`` for the calls made inside an autocast
region, in every module they judge (AMP101's backward in a callee, the float16 reach of AMP301
and AMP105), and for the calls naming a function they ask about, in a few modules (26 there);
they read a function's flow calls first by callee, receiver or line (AMP211's judge, the
engine-call seeds, the calls inside a ``with``), and whole in about one function in five
(1,100 of 5,229 in the main process, 1,050 in the forked judge). So a sent summary holds its
``calls`` pickled with those inside a region beside them, unpickled in their place the first
time they are read whole; and each flow its calls pickled one by one with their heads (callee,
whether the call has a receiver, line): a call is unpickled in its place when read, or as a
copy let go where it is read once.

The main process's peak resident memory on that tree, findings byte-identical: 141-144 MB
sent as objects, 129-131 MB with ``calls`` packed (and 7-12% less time, alternating series of
5 and 7), 119-120 MB with each function's flow calls packed whole, 116-117 MB packed one by one
(a value's resolution reads one call of a function), 105-109 MB with the import index's
change (``float16_reach._Imports.importers``) and the calls read once let go.

``unpacked`` gives the summary as the lint pass made it: what the cache stores, and what a run
in one process sees (it never packs).
"""

from __future__ import annotations

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from .shapes import CallRecord, ModuleSummary
    from .value_atoms import CallFlow, FunctionFlow


def packed(summary: ModuleSummary) -> ModuleSummary:
    """The summary to send: its call records and its flows' pickled (see the module docstring),
    each in the place it held."""
    import pickle  # (only in a worker that sends summaries: a run in one process never loads it)

    dump = pickle.dumps
    out: ModuleSummary = {}
    for key, value in summary.items():
        if key == "calls" and value:
            records: list[CallRecord] = value  # type: ignore[assignment]  # (the "calls" key)
            out["packed_calls"] = dump(records, protocol=-1)
            out["region_calls"] = [call for call in records if "region" in call]
        elif key == "flows":
            flows: dict[str, FunctionFlow] = value  # type: ignore[assignment]  # (the "flows" key)
            out["flows"] = {name: _packed_flow(flow, dump) for name, flow in flows.items()}
        else:
            out[key] = value  # type: ignore[literal-required]  # (a key of the same TypedDict)
    return out


def _packed_flow(flow: FunctionFlow, dump: Callable[..., bytes]) -> FunctionFlow:
    calls = flow.get("calls")
    if not calls:
        return flow
    out: FunctionFlow = {}
    for key, value in flow.items():
        if key == "calls":
            out["packed_calls"] = [dump(call, protocol=-1) for call in calls]
            out["call_heads"] = [_head(call) for call in calls]
        else:
            out[key] = value  # type: ignore[literal-required]  # (a key of the same TypedDict)
    return out


def unpacked(summary: ModuleSummary, flows: bool = True) -> ModuleSummary:
    """The summary with its call records, and (``flows``) its flows', in ``calls`` in their
    places: a new dict where any was packed, else the summary itself."""
    held = summary.get("flows")
    packed_flows = flows and held is not None and any("packed_calls" in flow for flow in held.values())
    if "packed_calls" not in summary and not packed_flows:
        return summary
    import pickle

    out: ModuleSummary = {}
    for key, value in summary.items():
        if key == "packed_calls":
            out["calls"] = pickle.loads(value)  # type: ignore[arg-type]  # (the "packed_calls" key)
        elif key == "flows" and packed_flows:
            flows_sent: dict[str, FunctionFlow] = value  # type: ignore[assignment]  # (the "flows" key)
            out["flows"] = {name: _unpacked_flow(flow) for name, flow in flows_sent.items()}
        elif key != "region_calls":
            out[key] = value  # type: ignore[literal-required]  # (a key of the same TypedDict)
    return out


def _unpacked_flow(flow: FunctionFlow, keep: bool = False) -> FunctionFlow:
    """The flow with its calls in ``calls``; ``keep``: each call unpickled stays in the packed
    flow's list (else the packed flow is left as it is: the cache's copy is let go at once)."""
    if "packed_calls" not in flow:
        return flow
    import pickle

    out: FunctionFlow = {}
    for key, value in flow.items():
        if key == "packed_calls":
            held = flow["packed_calls"]
            if keep:
                out["calls"] = [_record(flow, index) for index in range(len(held))]
            else:
                out["calls"] = [pickle.loads(item) if isinstance(item, bytes) else item for item in held]
        elif key != "call_heads":
            out[key] = value  # type: ignore[literal-required]  # (a key of the same TypedDict)
    return out


def _record(flow: FunctionFlow, index: int) -> CallFlow:
    """Call ``index`` of a packed flow, unpickled in its place in the list the first time."""
    held = flow["packed_calls"][index]
    if not isinstance(held, bytes):
        return held
    import pickle

    record: CallFlow = pickle.loads(held)
    flow["packed_calls"][index] = record
    return record


# ---- the summary's call records ------------------------------------------------------------


def calls(summary: ModuleSummary) -> list[CallRecord]:
    """The summary's call records, unpacked in place the first time they are asked for (its
    flows stay as they are)."""
    if "packed_calls" in summary:
        whole = unpacked(summary, flows=False)
        summary.clear()  # type: ignore[attr-defined]  # (a dict at run time; kept where it is held)
        summary.update(whole)
    return summary.get("calls", [])


def region_calls(summary: ModuleSummary) -> list[CallRecord]:
    """The summary's call records made inside an autocast region, in source order."""
    if "region_calls" in summary:
        return summary["region_calls"]
    return [call for call in summary.get("calls", []) if "region" in call]


# ---- a function's flow calls ---------------------------------------------------------------


def flow_calls(flow: FunctionFlow) -> list[CallFlow]:
    """The function's flow calls, unpacked in place the first time they are read whole."""
    if "packed_calls" in flow:
        whole = _unpacked_flow(flow, keep=True)
        flow.clear()  # type: ignore[attr-defined]  # (a dict at run time; kept where it is held)
        flow.update(whole)
    return flow.get("calls", [])


def flow_call(flow: FunctionFlow, index: int, keep: bool = True) -> CallFlow | None:
    """The function's flow call ``index`` (None past the last), unpacked alone; ``keep``: in its
    place (else a copy that the caller lets go, for a record read once)."""
    if "packed_calls" in flow:
        held = flow["packed_calls"]
        if index >= len(held):
            return None
        if not keep and isinstance(held[index], bytes):
            import pickle

            record: CallFlow = pickle.loads(held[index])  # type: ignore[arg-type]  # (bytes)
            return record
        return _record(flow, index)
    calls = flow.get("calls", [])
    return calls[index] if index < len(calls) else None


def calls_where(
    flow: FunctionFlow, wanted: Callable[[str, bool, int], bool] | None, keep: bool = True
) -> Iterator[CallFlow]:
    """The function's flow calls whose head (callee, whether it has a receiver, line) ``wanted``
    accepts (None: every call), in order: only those are unpacked (``keep``: as for
    ``flow_call``)."""
    for index, (callee, received, line) in enumerate(call_heads(flow)):
        if wanted is None or wanted(callee, received, line):
            call = flow_call(flow, index, keep)
            if call is not None:
                yield call


def call_heads(flow: FunctionFlow) -> list[tuple[str, bool, int]]:
    """Each flow call's callee as spelled (``""`` for none), whether it has a receiver, and
    its line, in order, read without unpacking the calls."""
    heads = flow.get("call_heads")
    if heads is not None:
        return heads
    return [_head(call) for call in flow.get("calls", [])]


def _head(call: CallFlow) -> tuple[str, bool, int]:
    return call.get("callee", ""), bool(call.get("recv")), call["at"][0]


def has_calls(flow: FunctionFlow) -> bool:
    """Whether the function makes a call its flow records (packed or not)."""
    return bool(flow.get("calls")) or "packed_calls" in flow
