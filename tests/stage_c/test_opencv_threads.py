"""Stage C keeps OpenCV to one thread per worker process, so our own workers do not contend with each other."""

import subprocess
import sys


def test_loading_stage_c_sets_opencv_to_one_thread() -> None:
    """Checked in a fresh interpreter: OpenCV's pool size is process-wide and another test may have set it."""
    probe = (
        "import cv2; before = cv2.getNumThreads(); "
        "import stage_e_dagster.stage_c.localise; "
        "print(before, cv2.getNumThreads())"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    before, after = (int(v) for v in out.stdout.split())
    assert after == 1, f"OpenCV kept {after} threads after Stage C loaded (it had {before})"
