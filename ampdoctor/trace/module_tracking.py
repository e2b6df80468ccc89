"""Which module is running, in the forward and in the backward: torch's ``ModuleTracker``, with
the backward side kept to the modules that have a backward of their own.

``ModuleTracker`` enters a module in the backward when the gradient of its outputs arrives (a
multi-grad hook registered on the outputs after its forward) and leaves it when the gradient of
its inputs is ready (a hook registered on the inputs before its forward). A module that returns
one of its inputs unchanged (``nn.Dropout(p=0)`` in training, as nanoGPT's ``resid_dropout`` is
by default; ``nn.Identity``; a layer that is switched off) puts both hooks on the same tensor: the
hook that leaves runs first, then the one that enters, and the module stays "running" for the
rest of the backward pass. Every backward op of the layers below it was then counted in that
dropout (``h.3.attn.resid_dropout``: 56 matmuls, none in ``h.0``).

The gradient of an output that is an input is the input's gradient: no backward op runs for it
in that module. ``GraphModuleTracker`` therefore registers the entering hook only on the outputs
that are not among the module's inputs (by identity), so the backward follows the autograd
graph: a module is entered only when its own backward nodes run.

A module none of whose inputs needs a gradient (a network's first layer, the first layer of each
branch of a two-tower model) gets no leaving hook at all: it stays "running" until the backward
ends, and the backward ops of every branch that runs after it were counted in it (a two-tower
model's user tower: all its matmuls in the item tower's first layer). Such a module leaves when
the gradients of its own parameters are ready, its last backward nodes.

Sibling modules fed by one tensor (a trunk's two branches, attention's separate query, key and
value projections) are all "running" in the backward from the moment the gradient reaches them
until the shared input's gradient is ready, so the tracker cannot tell whose backward runs. The
autograd graph can: after each forward, the nodes between the module's outputs and its inputs
are the module's (the innermost module's, as the inner forwards end first), and in the backward
the node autograd runs names its module (``node_module``). The map holds the nodes of the
iterations in the op census only, and is emptied when each backward ends. A checkpoint runs
its modules' forward again inside the backward, under the node that needed the activations:
its ops belong to the module whose forward runs (forward hooks fire then too).
"""

from __future__ import annotations

import weakref
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Callable, Optional

import torch
from torch.autograd.graph import register_multi_grad_hook
from torch.utils._pytree import tree_flatten
from torch.utils.module_tracker import ModuleTracker

# The parts of ``ModuleTracker`` the override uses (stable since torch 2.4, private): without one
# of them the tracker keeps torch's own behaviour.
_NEEDS = ("_get_mod_name", "_get_pop_fn", "_get_append_fn", "_hooks")
# Autograd nodes mapped to modules at most (a forward of a large model makes tens of thousands).
_MAX_NODES = 200_000


class GraphModuleTracker(ModuleTracker):
    """``ModuleTracker`` whose backward leaves out modules that hand an input back unchanged,
    and leaves a module without inputs that need a gradient once its parameters have theirs."""

    def __init__(self, quiet: Callable[[], AbstractContextManager[Any]] = nullcontext) -> None:
        super().__init__()
        # Around the tracker's own hooks: the census must not count the view through which
        # ``register_multi_grad_hook`` finds a parameter's gradient accumulator.
        self._quiet = quiet
        # The parameter hook of each such module, replaced at its next forward (the last
        # backward is over by then): a parameter would otherwise gather one per iteration.
        self._leaving: weakref.WeakKeyDictionary[torch.nn.Module, Any] = weakref.WeakKeyDictionary()
        # Autograd node → the tracker's name of the innermost module whose forward made it.
        self._nodes: dict[Any, str] = {}
        self._clearing = False  # a callback empties the map when the running backward ends
        # The modules whose forward a checkpoint runs again inside the backward, innermost last,
        # with the node they run in (a recomputation may stop early, leaving forwards unfinished).
        self._recomputed: list[tuple[Any, str]] = []

    def _fw_pre_hook(self, mod: torch.nn.Module, input: Any) -> None:
        super()._fw_pre_hook(mod, input)
        if self.is_bw and hasattr(self, "_get_mod_name"):
            # A checkpoint's forward, run again inside the node that needs its activations.
            self._recomputed.append((torch._C._current_autograd_node(), self._get_mod_name(mod)))
        if not all(hasattr(self, name) for name in _NEEDS) or not torch.is_grad_enabled() or self.is_bw:
            return
        if any(isinstance(a, torch.Tensor) and a.requires_grad for a in tree_flatten(input)[0]):
            return  # torch's own hook leaves it when its inputs' gradients are ready
        params = [p for p in mod.parameters() if p.requires_grad]
        if not params:
            return
        previous = self._leaving.pop(mod, None)
        if previous is not None:
            previous.remove()
        with self._quiet():
            handle = register_multi_grad_hook(params, self._get_pop_fn(self._get_mod_name(mod), True))
        self._leaving[mod] = handle
        self._hooks.append(handle)

    # torch's private helpers (untyped there), as the override calls them.
    _get_mod_name: Callable[[torch.nn.Module], str]
    _get_pop_fn: Callable[[str, bool], Callable[..., None]]
    _get_append_fn: Callable[[str, bool], Callable[..., None]]

    def _fw_post_hook(self, mod: torch.nn.Module, input: Any, output: Any) -> None:
        if self._recomputed and self.is_bw:
            self._recomputed.pop()
        if not all(hasattr(self, name) for name in _NEEDS):
            super()._fw_post_hook(mod, input, output)
            return
        name = self._get_mod_name(mod)
        self._get_pop_fn(name, False)()
        inputs = {id(a) for a in tree_flatten(input)[0] if isinstance(a, torch.Tensor)}
        outputs, _ = tree_flatten(output)
        own = [a for a in outputs if isinstance(a, torch.Tensor) and a.requires_grad and id(a) not in inputs]
        if own:
            self._hooks.append(register_multi_grad_hook(own, self._get_append_fn(name, True)))
            if not self.is_bw:
                self._claim(name, own, input)

    def _claim(self, name: str, outputs: list[torch.Tensor], input: Any) -> None:
        """Map to ``name`` the autograd nodes between ``outputs`` and the module's inputs that no
        inner module has claimed. The walk stops at the inputs' nodes and at nodes of modules
        outside this one (a tensor the module read from elsewhere)."""
        nodes = self._nodes
        if len(nodes) >= _MAX_NODES:
            return
        # The nodes themselves, not their ids: a node's Python object lives only while it is
        # held, and one made again for the same node may have another id (or a freed one's).
        boundary = {a.grad_fn for a in tree_flatten(input)[0] if isinstance(a, torch.Tensor) and a.grad_fn}
        inner = name + "."
        stack = [a.grad_fn for a in outputs if a.grad_fn is not None]
        seen: set[Any] = set()
        while stack and len(nodes) < _MAX_NODES:
            node = stack.pop()
            if node in seen or node in boundary:
                continue
            seen.add(node)
            owner = nodes.get(node)
            if owner is None:
                nodes[node] = name
            elif owner != name and not owner.startswith(inner):
                continue  # another module's: the walk left this one
            stack.extend(child for child, _ in node.next_functions if child is not None)

    def node_module(self) -> Optional[str]:
        """In the backward, the tracker's name of the module whose forward made the node that
        autograd runs now, or the module whose forward a checkpoint runs again now; None where
        no module made it (the loss) or outside the backward."""
        running = torch._C._current_autograd_node()
        if self._recomputed:
            if self._recomputed[-1][0] is running:
                return self._recomputed[-1][1]
            self._recomputed.clear()  # that recomputation is over
        if not self._nodes:
            return None
        if not self._clearing:
            self._clearing = True
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_ended)
        return self._nodes.get(running)

    def _backward_ended(self) -> None:
        self._nodes.clear()
        self._recomputed.clear()
        self._clearing = False

    def __exit__(self, *args: Any) -> None:
        super().__exit__(*args)  # type: ignore[no-untyped-call]
        self._nodes.clear()  # (a forward never backpropagated in the census holds its graph here)
        self._recomputed.clear()
