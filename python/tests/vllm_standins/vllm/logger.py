"""Stand-in for vllm.logger: a logging.Logger with vLLM's *_once methods."""

import logging
from typing import Any


class _VllmLogger(logging.Logger):
    _seen: set[tuple[str, str]] = set()

    def _once(self, level: int, msg: str, *args: Any) -> None:
        key = (logging.getLevelName(level), msg % args if args else msg)
        if key not in self._seen:
            self._seen.add(key)
            self.log(level, msg, *args, stacklevel=3)

    def debug_once(self, msg: str, *args: Any, **_: Any) -> None:
        self._once(logging.DEBUG, msg, *args)

    def info_once(self, msg: str, *args: Any, **_: Any) -> None:
        self._once(logging.INFO, msg, *args)

    def warning_once(self, msg: str, *args: Any, **_: Any) -> None:
        self._once(logging.WARNING, msg, *args)


def init_logger(name: str) -> _VllmLogger:
    previous = logging.getLoggerClass()
    logging.setLoggerClass(_VllmLogger)
    try:
        logger = logging.getLogger(name)
    finally:
        logging.setLoggerClass(previous)
    assert isinstance(logger, _VllmLogger), name
    return logger
