"""pytest plugin for a suite run in a subprocess: TensorFlow's probe answers from a JSON file.

`python -m validate -p synthetic_gpu_host -p tf_probe_answer ...` with GPUENV_TEST_TF_PROBE naming
a file holding the probe's answer (the dict `tf-info --speed` prints: build, devices, speed
figures). This machine has no GPU, so no TensorFlow here can measure a GPU figure; the answer is
SYNTHETIC, and everything after it (the fixtures, the check, the judging, the report) is the
suite's own. Only `Suite.tf_info`, the one call that starts TensorFlow's child, is replaced.
"""

from __future__ import annotations

import json
import os

from validate.measure.subproc import ProbeResult
from validate.session import Suite

_ANSWER = ProbeResult(json.loads(open(os.environ["GPUENV_TEST_TF_PROBE"]).read()), None, 0.0)
Suite.tf_info = lambda self: _ANSWER  # type: ignore[method-assign]
