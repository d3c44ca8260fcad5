"""Stand-in for the vLLM package: only what vLLM 0.33.0's tensorizer loader
modules import (see ../README.md)."""
