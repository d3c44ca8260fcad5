"""Stand-in package: tensorizer.py and tensorizer_loader.py are vLLM's own,
extracted here from the wheel by the test harness."""
