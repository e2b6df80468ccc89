"""Gradient statistics, per parameter, on the device.

Per parameter, at the moment the gradients hold their true values (after
``scaler.unscale_`` or before a plain ``optimizer.step``), the shares of elements that are
zero, that would fall below float16's smallest subnormal (2**-24), smallest normal (2**-14) or
below 2**-20 (a subnormal with at most 4 significant bits) when multiplied by the loss scale,
that are non-finite, and max |g|. ``gradient_row`` states
the definition; ``GradientMonitor`` computes the same numbers for all parameters at once, in
chunks of the flattened gradients (cache-sized on a CPU, large on an accelerator, where every
op is a kernel launch), with integer arithmetic on float32 bits. These statistics are sampled
(the session decides which iterations: the op-recording window, then every n-th). On the other
iterations, max |g| per gradient tells which parameters held inf/NaN, so non-finite gradients
are seen on every iteration: one fused ``_foreach_norm`` per device and dtype on CUDA, one
``aminmax`` per gradient elsewhere (faster there). It is skipped when the scaler's own
``found_inf`` already says that none did and can be read without a device sync.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from ..float16 import FLOAT16_COARSE_SUBNORMAL, FLOAT16_SMALLEST_NORMAL, FLOAT16_SMALLEST_SUBNORMAL
from .autocast_state import autocast_off
from .numerics import ModuleRegistry, ParamInfo
from .ops import quiet

# Gradient statistics run over chunks of at most this many elements, packed from the flattened
# gradients: a handful of ops per chunk instead of a dozen per parameter, in a scratch buffer that
# is reused across iterations (no allocation per iteration). On a CPU the chunk stays in cache.
# On an accelerator each op is a kernel launch that costs host time whatever its size, so chunks
# are 16 times larger there (a 32 MiB scratch buffer): 2**16-element chunks took ~1,460 chunks
# of ~10 launches each for 96M parameters. Exactness: each element of a row is at most 255, so a
# per-piece int32 sum is at most 255 * 2**20 < 2**31 (no overflow); the row's floor is subtracted
# on the device, and the counts left (at most 2**20 < 2**24) are exact in the float32 the batch
# is read in.
GRADIENT_CHUNK = 1 << 16
ACCELERATOR_GRADIENT_CHUNK = 1 << 20

# Devices whose fused ``_foreach_norm`` takes max |g| of many gradients in a few launches, with
# NaN propagating; elsewhere (a CPU runs it tensor by tensor, several times slower than
# ``aminmax``) the check takes one ``aminmax`` per gradient.
_FUSED_CHECK_DEVICES = frozenset({"cuda"})


def chunk_elements(device: torch.device) -> int:
    """How many elements one chunk of the gradient statistics holds on ``device``."""
    return GRADIENT_CHUNK if device.type == "cpu" else ACCELERATOR_GRADIENT_CHUNK


# Rows of int32 values whose per-piece sums, less ``_ROW_FLOORS`` times the piece's length (taken
# off on the device), count elements: |g| != 0; |g|*scale != 0; |g|*scale >= 2**-24;
# |g|*scale >= 2**-20; |g| not finite; |g|*scale >= 2**-14. The row order lets paired rows come
# from one op over both |g| and |g| * scale.
_NONZERO, _SCALED_NONZERO, _AT_LEAST_SUBNORMAL, _AT_LEAST_FINE, _NONFINITE, _AT_LEAST_NORMAL = range(6)
_COUNTED_ROWS = 6
_ROW_FLOORS = (0, 0, 102, 106, 254, 112)
# Biased float32 exponents: 2**-24, 2**-20 and 2**-14 have exponent fields 103, 107 and 113; inf
# and NaN 255.
_EXPONENT_SHIFT = 23


def gradient_row(grad: torch.Tensor, scale: Optional[torch.Tensor], grads_scaled: bool) -> torch.Tensor:
    """[zero, below subnormal, subnormal, non-finite, coarse subnormal shares, max |g| unscaled]
    of one gradient.

    "Below subnormal", "subnormal" and "coarse subnormal" (the part of the subnormal band below
    2**-20) compare |g| times the loss scale with float16's thresholds: the value the gradient
    had (or would have had) in float16 during backward.
    This is the definition, written plainly; ``GradientChunks`` computes the same numbers in
    fewer, cheaper passes, and the tests hold the two equal.
    """
    magnitude = grad.detach().abs().to(torch.float32)
    if scale is None:
        scaled, true = magnitude, magnitude
    else:
        scale = scale.to(magnitude.device)
        scaled, true = (magnitude, magnitude / scale) if grads_scaled else (magnitude * scale, magnitude)
    finite = torch.isfinite(magnitude)
    nonzero = scaled > 0
    shares = torch.stack(
        [
            (magnitude == 0).to(torch.float32).mean(),
            (nonzero & (scaled < FLOAT16_SMALLEST_SUBNORMAL)).to(torch.float32).mean(),
            (nonzero & (scaled < FLOAT16_SMALLEST_NORMAL) & (scaled >= FLOAT16_SMALLEST_SUBNORMAL))
            .to(torch.float32)
            .mean(),
            (~finite).to(torch.float32).mean(),
            (nonzero & (scaled < FLOAT16_COARSE_SUBNORMAL) & (scaled >= FLOAT16_SMALLEST_SUBNORMAL))
            .to(torch.float32)
            .mean(),
            torch.where(finite, true, torch.zeros_like(true)).amax(),
        ]
    )
    return shares


@dataclass
class GradientChunk:
    """One chunk's results in two ``DeviceBatch`` slots: per piece, the six row counts, and the
    largest finite |g|; piece i belongs to ``GradientChunks.params[owners[i]]``."""

    sums_slot: int
    maxima_slot: int
    owners: list[int]


@dataclass
class GradientChunks:
    """The gradient statistics of one capture, still on the device."""

    params: list[ParamInfo] = field(default_factory=list)
    numels: list[int] = field(default_factory=list)
    chunks: list[GradientChunk] = field(default_factory=list)

    def rows(self, values: list[list[float]]) -> list[tuple[ParamInfo, list[float]]]:
        """Per parameter, the ``gradient_row`` values, from the pieces read back."""
        counts = [[0.0] * _COUNTED_ROWS for _ in self.params]
        maxima = [0.0 for _ in self.params]
        for chunk in self.chunks:
            sums, piece_maxima = values[chunk.sums_slot], values[chunk.maxima_slot]
            for piece, owner in enumerate(chunk.owners):
                totals = counts[owner]
                for row in range(_COUNTED_ROWS):
                    totals[row] += sums[piece * _COUNTED_ROWS + row]
                maxima[owner] = max(maxima[owner], piece_maxima[piece])
        rows = []
        for info, numel, totals, maximum in zip(self.params, self.numels, counts, maxima):
            nonzero, scaled_nonzero, subnormal_or_more, fine_or_more, nonfinite, normal_or_more = totals
            shares = [
                (numel - nonzero) / numel,
                (scaled_nonzero - subnormal_or_more) / numel,
                (subnormal_or_more - normal_or_more) / numel,
                nonfinite / numel,
                (subnormal_or_more - fine_or_more) / numel,
            ]
            rows.append((info, [*shares, maximum]))
        return rows


@dataclass
class GradientCheck:
    """An iteration without the shares: the parameters that had a gradient and, unless their
    gradients are known to be finite (the scaler found no inf/NaN), whether each held inf/NaN.
    ``groups`` are (slot, owners, per owner): one stacked tensor per device and dtype, holding
    ``per owner`` values of each owner in turn ([min, max] from ``aminmax``, or [max |g|] from
    the fused norm); any of them is non-finite exactly when the gradient holds inf/NaN."""

    params: list[ParamInfo] = field(default_factory=list)
    groups: list[tuple[int, list[int], int]] = field(default_factory=list)

    def nonfinite(self, values: list[list[float]]) -> list[tuple[ParamInfo, bool]]:
        flags = [False] * len(self.params)
        isfinite = math.isfinite
        for slot, owners, per_owner in self.groups:
            numbers = values[slot]
            for position, owner in enumerate(owners):
                start = position * per_owner
                flags[owner] = not all(isfinite(v) for v in numbers[start : start + per_owner])
        return list(zip(self.params, flags))


class GradientMonitor:
    """Per-parameter gradient statistics (see ``gradient_row`` for what they are).

    Each capture flattens the gradients into pieces packed into chunks. Per chunk, |g| goes into
    a float32 scratch buffer and everything else is integer arithmetic on its bits: for a
    non-negative float32, comparing with a power of two is comparing the exponent field
    (``bits >> 23``), and ``clamp(e, k - 1, k)`` is ``k - 1`` plus the indicator of ``e >= k``,
    so one clamp per row and one sum per piece and row count the elements; ``clamp(bits, 0, 1)``
    counts the non-zeros. (Comparisons that produce booleans, and sums of booleans, are several
    times slower on CPU.) |g| * scale is the same float32 product ``gradient_row`` compares, so
    the counts equal its for any scale; NaN and inf land where its comparisons put them:
    non-finite, and in none of the scaled classes.
    """

    def __init__(self, registry: ModuleRegistry, session: Any) -> None:
        self._registry = registry
        self._session = session
        self._failed = False
        self._scratch: dict[torch.device, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def release(self) -> None:
        self._scratch.clear()

    def capture(
        self,
        optimizer: Any,
        label: str,
        scale: Optional[torch.Tensor],
        grads_scaled: bool,
        full: bool = True,
        known_finite: bool = False,
    ) -> None:
        """Queue this optimizer's gradient statistics: the shares and max |g| (``full``), or the
        check of a non-sampled iteration: which parameters held inf/NaN, skipped (no device
        work) when the gradients are ``known_finite``."""
        if self._failed:
            return
        try:
            if full:
                self._capture(optimizer, label, scale, grads_scaled)
            else:
                self._check(optimizer, label, known_finite)
        except Exception as exc:  # never let the instrument break the script
            self._failed = True
            self._session.instrument_failed("gradient statistics", exc)

    def gradients(self, optimizer: Any, label: str) -> Iterator[tuple[ParamInfo, torch.Tensor]]:
        """(info, detached gradient values) of every parameter with a non-empty gradient."""
        for group_index, group in enumerate(optimizer.param_groups):
            for index, param in enumerate(group["params"]):
                grad = getattr(param, "grad", None)
                if grad is None:
                    continue
                if grad.is_sparse:
                    grad = grad.coalesce()._values()
                if grad.numel() == 0:  # nothing to measure (also a sparse gradient with no entries)
                    continue

                def fallback(g: int = group_index, i: int = index) -> str:
                    return f"{label}.param_groups[{g}][{i}]"

                info = self._registry.param(param, fallback)
                yield info, grad.detach() if grad.requires_grad else grad

    def _check(self, optimizer: Any, label: str, known_finite: bool) -> None:
        capture = GradientCheck()
        groups: dict[tuple[torch.device, torch.dtype], tuple[list[int], list[torch.Tensor]]] = {}
        with quiet():  # the tracer's ops, from a gradient's detach on
            for info, grad in self.gradients(optimizer, label):
                if not known_finite:
                    owners, grads = groups.setdefault((grad.device, grad.dtype), ([], []))
                    owners.append(len(capture.params))
                    grads.append(grad)
                capture.params.append(info)
            if not capture.params:
                return
            batch = self._session.pending.batch
            with torch.no_grad(), autocast_off(device.type for device, _ in groups):
                for (device, dtype), (owners, grads) in groups.items():
                    if device.type in _FUSED_CHECK_DEVICES and dtype.is_floating_point:
                        # max |g| of every gradient in one fused pass; NaN propagates, inf is inf.
                        values, per_owner = list(torch._foreach_norm(grads, math.inf)), 1
                    else:
                        values, per_owner = [v for grad in grads for v in torch.aminmax(grad)], 2
                    capture.groups.append((batch.add(torch.stack(values)), owners, per_owner))
        self._session.pending.gradient_checks.append(capture)

    def _capture(self, optimizer: Any, label: str, scale: Optional[torch.Tensor], grads_scaled: bool) -> None:
        capture = GradientChunks()
        by_device: dict[torch.device, list[tuple[int, torch.Tensor]]] = {}
        with quiet():  # the tracer's ops, from a gradient's detach and flattened view on
            for info, grad in self.gradients(optimizer, label):
                by_device.setdefault(grad.device, []).append((len(capture.params), grad.reshape(-1)))
                capture.params.append(info)
                capture.numels.append(grad.numel())
            if not capture.params:
                return
            batch = self._session.pending.batch
            with torch.no_grad(), autocast_off(device.type for device in by_device):
                for device, flats in by_device.items():
                    device_scale = None if scale is None else scale.detach().to(device)
                    for owners, pieces in _chunks(flats, chunk_elements(device)):
                        sums, piece_maxima = self._measure_chunk(device, pieces, device_scale, grads_scaled)
                        capture.chunks.append(GradientChunk(batch.add(sums), batch.add(piece_maxima), owners))
        self._session.pending.gradients.append(capture)

    def _buffers(self, device: torch.device, size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The scratch buffers of ``device``, for chunks of up to ``size`` elements, and the
        row floors as a device tensor."""
        buffers = self._scratch.get(device)
        if buffers is None or buffers[0].shape[1] < size:
            length = max(size, chunk_elements(device))
            buffers = (
                torch.empty((2, length), dtype=torch.float32, device=device),
                torch.empty((_COUNTED_ROWS, length), dtype=torch.int32, device=device),
                torch.tensor(_ROW_FLOORS, dtype=torch.int32, device=device),
            )
            self._scratch[device] = buffers
        return buffers

    def _measure_chunk(
        self, device: torch.device, pieces: list[torch.Tensor], scale: Optional[torch.Tensor], grads_scaled: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        size = sum(piece.numel() for piece in pieces)
        floats, ints, floors = self._buffers(device, size)
        magnitude, rows = floats[0, :size], ints[:, :size]
        # |g| (IEEE abs clears the sign bit of NaN too, which the integer rows below rely on).
        if len(pieces) == 1 and pieces[0].dtype == torch.float32:
            torch.abs(pieces[0], out=magnitude)  # one pass instead of a copy and an abs
        else:
            torch.cat(pieces, out=magnitude).abs_()
        bits = floats[:, :size].view(torch.int32)
        if scale is None or grads_scaled:
            bits = bits[:1].expand(2, size)
        else:
            torch.mul(magnitude, scale, out=floats[1, :size])
        # bits[0] holds |g| and bits[1] |g| * scale (the same row when nothing is to be scaled).
        torch.clamp(bits, 0, 1, out=rows[_NONZERO : _SCALED_NONZERO + 1])
        exponents = torch.bitwise_right_shift(bits, _EXPONENT_SHIFT, out=rows[_NONFINITE : _AT_LEAST_NORMAL + 1])
        torch.clamp(exponents[1], 102, 103, out=rows[_AT_LEAST_SUBNORMAL])
        torch.clamp(exponents[1], 106, 107, out=rows[_AT_LEAST_FINE])
        exponents[0].clamp_(254, 255)
        exponents[1].clamp_(112, 113)
        magnitude.nan_to_num_(nan=0.0, posinf=0.0)
        sums, maxima = [], []
        offset = 0
        for piece in pieces:
            end = offset + piece.numel()
            # Counts, below 2**24 for any chunk size used: exact once read as float32.
            sums.append(rows[:, offset:end].sum(dim=1, dtype=torch.int32).sub_(floors, alpha=end - offset))
            maxima.append(magnitude[offset:end].amax())
            offset = end
        piece_maxima = torch.stack(maxima)
        if grads_scaled and scale is not None:
            # The division is monotone, so max(|g| / s) = max|g| / s.
            piece_maxima = piece_maxima / scale
        return torch.stack(sums), piece_maxima


def _chunks(flats: list[tuple[int, torch.Tensor]], limit: int) -> Iterator[tuple[list[int], list[torch.Tensor]]]:
    """Pack flattened gradients, cut into pieces of at most ``limit`` elements, into chunks of at
    most ``limit`` elements: (owner of each piece, the pieces)."""
    owners: list[int] = []
    pieces: list[torch.Tensor] = []
    filled = 0
    for owner, flat in flats:
        start = 0
        while start < flat.numel():
            take = min(limit - filled, flat.numel() - start)
            owners.append(owner)
            pieces.append(flat[start : start + take])
            filled += take
            start += take
            if filled == limit:
                yield owners, pieces
                owners, pieces, filled = [], [], 0
    if pieces:
        yield owners, pieces
