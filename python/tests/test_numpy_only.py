"""tensorizer_rs works with numpy alone: torch is blocked from importing."""

import subprocess
import sys
import textwrap

import pytest

from tzhelpers import TZ_NAME


@pytest.mark.skipif(TZ_NAME != "tensorizer_rs", reason="tensorizer itself requires torch")
def test_write_and_read_numpy_without_torch(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["torch"] = None  # any "import torch" now raises ImportError
        import numpy as np
        import tensorizer_rs as tz

        path = {str(tmp_path / "np.tensors")!r}
        arrays = {{
            "f": np.arange(12, dtype=np.float32).reshape(3, 4),
            "i": np.array([1, -2, 3], dtype=np.int64),
            "b": np.array([True, False]),
            "t": np.arange(6, dtype=np.float64).reshape(2, 3).T,  # non-contiguous
        }}
        with tz.TensorSerializer(path) as s:
            for name, a in arrays.items():
                s.write_tensor(0, name, tz.TensorType.STATE_DICT, a)
        d = tz.TensorDeserializer(path, device="cpu", lazy_load=True, verify_hash=True)
        got = {{name: arr for _, _, name, arr, opaque, _ in d.read_numpy_arrays()}}
        assert set(got) == set(arrays), got.keys()
        for name, a in arrays.items():
            assert got[name].dtype == a.dtype and np.array_equal(got[name], a), name
        assert "torch" not in sys.modules or sys.modules["torch"] is None
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
