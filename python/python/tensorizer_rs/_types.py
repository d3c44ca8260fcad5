"""Enumerations shared by the reader and writer."""

import enum


class TensorType(enum.IntEnum):
    """What a tensor was written as."""

    PARAM = 0
    BUFFER = 1
    STATE_DICT = 2
