"""Stand-in for vllm.utils.argparse_utils."""

import argparse


class FlexibleArgumentParser(argparse.ArgumentParser):
    pass
