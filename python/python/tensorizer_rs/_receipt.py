"""Load receipts: what a ``TensorDeserializer`` has loaded, checked and
read, as an immutable :class:`LoadReceipt` (``TensorDeserializer.receipt``,
made natively: python/src/loader/receipt.rs).

tensorizer has no such record; it is ours (spec §18.7).
"""

from __future__ import annotations

from . import _native

LoadReceipt = _native.LoadReceipt
