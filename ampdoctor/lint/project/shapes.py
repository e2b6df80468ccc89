"""The typed shape of a module's summary: what ``summary.py`` makes, the cache stores as JSON
and the link step and the checks read.

The records are ``TypedDict``s, defined for the type checker only: at run time a summary is the
plain dict the cache decodes (the lint path never imports ``typing``). Producers are annotated
with them (``summarize`` returns a ``ModuleSummary``, ``function_summary`` a
``FunctionSummary``) and so are the readers (``Project.summary``, ``Target.function``), so that
mypy checks every key a check asks for against what the summary can hold. Positions are
``[line, column, end_line, end_column]``. A field that is absent means "nothing of that kind".

Which check raises which code is in ``checks.py`` (``PROJECT_CHECKS``).
"""

from __future__ import annotations

TYPE_CHECKING = False  # what ``typing.TYPE_CHECKING`` is at run time, without importing typing
if TYPE_CHECKING:
    from typing import Any, TypedDict

    from .value_atoms import CallFlow as FunctionFlowCall
    from .value_atoms import FunctionFlow

    class RegionRecord(TypedDict, total=False):
        """An enabled autocast region: where, its dtype (``None`` when it cannot be told) and
        device."""

        at: list[int]
        dtype: str | None
        device: str | None

    class ScalerState(TypedDict, total=False):
        """Whether a scaled backward came before a call with no ``unscale_`` since: ``kind`` is
        ``scaled``, ``unscaled`` or ``none``; ``backward`` where that backward is."""

        kind: str
        backward: list[int]

    class ArgumentRecord(TypedDict, total=False):
        """An argument of a recorded call: its position or keyword, its spelling, and for a
        scaler its state at the call."""

        pos: int
        kw: str
        name: str
        is_scaler: bool
        state: ScalerState
        unscaled_before: bool  # ``name.unscale_(...)`` runs before the call in its frame
        none: bool  # the argument is ``None``

    class CallRecord(TypedDict, total=False):
        """A call that may land in project code (``call_records.py``)."""

        callee: str
        frame: str
        at: list[int]
        region: RegionRecord
        loop: list[int]
        epoch_loop: bool
        in_epoch: bool
        arms: list[list[int | str]]  # [line, column, kind] of each branch between it and its loop
        assigned: bool
        args: list[ArgumentRecord]
        star: bool
        nested_def: bool  # the callee is a function defined inside the calling function

    # What the linker resolves: a summary's call record or a flow's (``value_atoms.CallFlow``).
    CallLike = CallRecord | FunctionFlowCall

    class UpdateRecord(TypedDict, total=False):
        """An ``S.update()`` after ``S.step(optimizer)`` (``function_parts._updates_after_step``):
        ``scaler`` and ``optimizer`` as spelled, or ``#i`` for the parameter at index i."""

        scaler: str
        optimizer: str
        at: list[int]
        guarded: bool

    class ProtocolRecord(TypedDict, total=False):
        """The GradScaler calls a method makes on one field of ``self``: ``events`` in order, as
        ``[kind, optimizer parameter index or None]`` (``function_parts._scaler_protocol``)."""

        field: str
        events: list[list[Any]]

    class HalfReturn(TypedDict, total=False):
        """A local made float16 and returned (``index``: its place in a returned tuple)."""

        at: list[int]
        index: int | None
        name: str

    class TrainsReturned(TypedDict, total=False):
        """An optimizer built over the parameters of what a call returned (``index``: the
        element of the call's tuple bound to the model)."""

        callee: str
        index: int | None
        at: list[int]
        model: str

    class ScalerDefault(TypedDict, total=False):
        """A scaler parameter that defaults to None, its index, and the float16 region."""

        param: str
        index: int
        region: list[int]

    class NewScaler(TypedDict, total=False):
        """A GradScaler built into a local (or a ``self.`` field) and stepped in the function."""

        at: list[int]
        name: str
        single_step: bool

    class HalfRisk(TypedDict, total=False):
        """What float16 autocast would break in a function (``float16_sites.half_risks``): an
        AMP105 BCE call (``what``) or an AMP301 fill (``text``, ``label``, ``bound``,
        ``receiver``)."""

        code: str
        at: list[int]
        what: str
        text: str
        label: str
        bound: str
        receiver: str | None

    class FrameworkRun(TypedDict, total=False):
        """A Lightning ``Trainer``/``Fabric`` with a float16 mixed precision and a call that
        hands it a model (``float16_sites.framework_runs``)."""

        api: str
        at: list[int]
        precision: str
        dtype: str
        accelerator: str | None
        frame: str
        call: list[int]
        model: str

    class FunctionSummary(TypedDict, total=False):
        """What one function does with the training step (``function_parts.py`` documents
        each part; ``uses`` and ``half_risks`` are ``float16_sites.py``'s)."""

        at: list[int]
        params: list[str]
        star: bool
        clips: list[dict[str, Any]]  # {param, clip, optimizer}
        clips_for_caller: list[int]
        unscales_for_caller: list[Any]  # [scaler, optimizer or None, where]: an index or ".field"
        backward: list[int]
        scales: list[Any]  # [parameter, where]: a scaled backward on a scaler it receives
        updated: list[str]  # parameters and scalers ``X`` of an ``X.update()`` call
        steps_handed: list[dict[str, Any]]  # {scaler, at, handed}: stepped, not updated, handed on
        returns_scaler: list[int]
        stub: bool
        updates: list[UpdateRecord]
        protocol: ProtocolRecord
        returns_half: HalfReturn
        trains_returned: list[TrainsReturned]
        scaler_default: ScalerDefault
        new_scaler: NewScaler
        builds_optimizer: bool
        uses: list[str]
        half_risks: list[HalfRisk]

    class ClassRecord(TypedDict, total=False):
        """A class statement: where it is and its bases as spelled."""

        at: list[int]
        bases: list[str]

    class ModuleSummary(TypedDict, total=False):
        """One module's summary (``summary.py`` documents each part); ``light`` marks the
        summary of a module that only names things (``light_summary``)."""

        regions: list[RegionRecord]
        float16_code: bool | None
        scalers_built: list[list[int]]
        imports: dict[str, str]
        aliases: dict[str, str]
        classes: dict[str, ClassRecord]
        instances: dict[str, str]
        functions: dict[str, FunctionSummary]
        calls: list[CallRecord]
        framework: list[FrameworkRun]
        flows: dict[str, FunctionFlow]
        trains: list[str]
        paths: list[str]
        light: bool
        # As the lint pass's workers send it (``packed_calls.py``): ``calls`` pickled, and the
        # calls made inside an autocast region.
        packed_calls: bytes
        region_calls: list[CallRecord]


__all__: list[str] = []
