"""vLLM's plugin hook (the ``vllm.general_plugins`` entry point, which vLLM
calls in its front end, engine core and every worker).

It imports nothing heavy. With ``TENSORIZER_RS_AS_TENSORIZER=1`` it makes
``import tensorizer`` give ``tensorizer_rs`` (``install_as_tensorizer``),
so vLLM's built-in ``--load-format tensorizer`` runs on this package with
no code changed.
"""

from __future__ import annotations

from ._alias import install_if_asked


def register() -> None:
    """The entry point: idempotent, as vLLM may call it more than once."""
    install_if_asked()
