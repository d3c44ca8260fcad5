"""vLLM's plugin hook (the ``vllm.general_plugins`` entry point, which vLLM
calls in its front end, engine core and every worker).

It registers ``--load-format tensorizer_rs`` (``vllm_loader``; vLLM's own
loader registry is the only vLLM module it imports), and with
``TENSORIZER_RS_AS_TENSORIZER=1`` it makes ``import tensorizer`` give
``tensorizer_rs`` (``install_as_tensorizer``), so vLLM's built-in
``--load-format tensorizer`` runs on this package with no code changed.
"""

from __future__ import annotations

import importlib.util

from ._alias import install_if_asked


def register() -> None:
    """The entry point: idempotent, as vLLM may call it more than once.
    Without vLLM installed (someone calling it by hand) there is no
    registry to add the loader to, and only the alias is applied."""
    install_if_asked()
    if importlib.util.find_spec("vllm") is None:
        return
    from . import vllm_loader

    vllm_loader.register()
