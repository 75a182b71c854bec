"""gpuenv's server validation suite: pytest checks that a server is ready for the team's images.

Runs on a bare host (`python -m validate`) and inside images where only this folder is copied:
it needs the stdlib, pytest, nvidia-ml-py, and whichever of PyTorch and TensorFlow are installed.
`validate.host.nvml` is also the library gpuenv uses to read the driver and GPUs.
"""

#: What the suite needs besides the frameworks; gpuenv adds these to every rendered environment,
#: so `python -m validate` runs inside every image it builds.
REQUIREMENTS = ("pytest>=7", "nvidia-ml-py>=12.535")
