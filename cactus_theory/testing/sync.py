r"""Prove on CPU tensors that a code path never reads a tensor on the host.

On a GPU, ``torch.cuda.set_sync_debug_mode("error")`` raises at any host-device
synchronization. On CPU tensors nothing waits, so that check sees nothing; the recorder here
sees the same operations at the Python level instead, on any device:

* tensor to host value: ``Tensor.item``, ``bool``/``int``/``float``/``index`` of a tensor
  (``aten._local_scalar_dense``), ``Tensor.tolist``, ``Tensor.numpy``, ``Tensor.cpu``,
  ``numpy.asarray(tensor)`` (``__array__``);
* operations whose output size depends on the values (they synchronize on CUDA):
  ``nonzero``/``argwhere``, boolean-mask indexing and assignment, ``masked_select``,
  ``unique``, ``bincount``, ``repeat_interleave`` without ``output_size``, ``equal``;
* host data to device: ``torch.tensor``/``torch.as_tensor``/``torch.asarray`` of Python or
  numpy data (``aten.lift_fresh``), ``torch.from_numpy`` (a blocking host-to-device copy on
  CUDA).

Device-to-device copies and ``Tensor.to`` are not flagged (on CPU tensors every device is the
host: the recorder cannot tell them apart); a host-to-device copy of a CPU tensor built
without host data (``torch.zeros``, ``torch.full``) is not one either.

Source: PyTorch's ``torch.overrides.TorchFunctionMode`` and
``torch.utils._python_dispatch.TorchDispatchMode``; the synchronizing CUDA operations are
those ``torch.cuda.set_sync_debug_mode`` reports (PyTorch documentation, CUDA semantics).
"""

from __future__ import annotations

import contextlib
import traceback
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["HostSync", "HostSyncError", "record_host_syncs", "assert_no_host_sync"]

#: Tensor methods and torch functions that read a tensor on the host or size their output by
#: its values (the torch-function level).
_FUNCTIONS = frozenset(
    {
        "item",
        "tolist",
        "numpy",
        "cpu",
        "__array__",
        "__bool__",
        "__int__",
        "__float__",
        "__index__",
        "nonzero",
        "argwhere",
        "masked_select",
        "unique",
        "unique_consecutive",
        "bincount",
        "equal",
        "allclose",
    }
)
#: Constructors that copy host data (flagged unless given a tensor).
_FROM_HOST = frozenset({"tensor", "as_tensor", "asarray"})
#: aten operators flagged at the dispatch level (what the functions above reach, and the
#: host-data constructors by any route).
_ATEN = frozenset(
    getattr(torch.ops.aten, name)
    for name in (
        "_local_scalar_dense",
        "nonzero",
        "masked_select",
        "lift_fresh",
        "_unique",
        "_unique2",
        "unique_dim",
        "unique_consecutive",
        "bincount",
        "equal",
        "is_nonzero",
    )
)


@dataclass(frozen=True)
class HostSync:
    """One recorded host read: the operation and the innermost frame of the project calling it.

    Attributes
    ----------
    op : str
        The function or aten operator (``"item"``, ``"aten.lift_fresh.default"``, ...).
    where : str
        ``path:line`` of the innermost caller frame outside torch (or ``"?"``).
    """

    op: str
    where: str


def _caller() -> str:
    for frame in reversed(traceback.extract_stack()[:-2]):
        f = frame.filename.replace("\\", "/")
        if "/torch/" not in f and not f.endswith("/testing/sync.py"):
            return f"{f}:{frame.lineno}"
    return "?"


def _has_bool_index(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


class _Functions(TorchFunctionMode):
    def __init__(self, hits):
        super().__init__()
        self.hits = hits

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        flag = name in _FUNCTIONS
        if name in _FROM_HOST:
            data = args[0] if args else kwargs.get("data", kwargs.get("obj"))
            flag = not isinstance(data, torch.Tensor)
        elif name in ("__getitem__", "__setitem__") and len(args) > 1 and _has_bool_index(args[1]):
            flag, name = True, name + "[bool mask]"
        elif name == "repeat_interleave" and kwargs.get("output_size") is None:
            repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
            flag = isinstance(repeats, torch.Tensor)
        if flag:
            self.hits.append(HostSync(name, _caller()))
        return func(*args, **kwargs)


class _Aten(TorchDispatchMode):
    def __init__(self, hits):
        super().__init__()
        self.hits = hits

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in _ATEN:
            self.hits.append(HostSync(str(func), _caller()))
        return func(*args, **(kwargs or {}))


def _from_numpy_recorded(hits, orig):
    def from_numpy(*args, **kwargs):
        hits.append(HostSync("from_numpy", _caller()))
        return orig(*args, **kwargs)

    return from_numpy


@contextlib.contextmanager
def record_host_syncs():
    """Record every host read of a tensor inside the block (module docstring).

    Yields
    ------
    list of HostSync
        Filled while the block runs (in call order; an operation seen at both levels, e.g.
        ``.item()`` and ``aten._local_scalar_dense``, appears twice).

    Examples
    --------
    >>> import torch
    >>> x = torch.ones(3)
    >>> with record_host_syncs() as hits:
    ...     y = (x * 2).sum()
    >>> hits
    []
    >>> with record_host_syncs() as hits:
    ...     v = float(x.sum())
    >>> sorted({h.op for h in hits})
    ['__float__', 'aten._local_scalar_dense.default']
    """
    hits: list[HostSync] = []
    orig = torch.from_numpy
    torch.from_numpy = _from_numpy_recorded(hits, orig)
    try:
        with _Functions(hits), _Aten(hits):
            yield hits
    finally:
        torch.from_numpy = orig


class HostSyncError(AssertionError):
    """A block run under :func:`assert_no_host_sync` read a tensor on the host."""


@contextlib.contextmanager
def assert_no_host_sync(what: str = "the block"):
    """Raise :class:`HostSyncError` after the block when it read a tensor on the host.

    Parameters
    ----------
    what : str
        Named in the error message.

    Raises
    ------
    HostSyncError
        Listing each distinct (operation, caller) recorded, in call order.
    """
    with record_host_syncs() as hits:
        yield hits
    if hits:
        seen = list(dict.fromkeys((h.op, h.where) for h in hits))
        listed = "; ".join(f"{op} at {where}" for op, where in seen[:8])
        more = f" (+{len(seen) - 8} more)" if len(seen) > 8 else ""
        raise HostSyncError(f"{what} reads tensors on the host: {listed}{more}")
