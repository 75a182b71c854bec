"""gpuenv: the same GPU deep-learning environment on every server, and proof that each is ready."""

from pathlib import Path

__version__ = "0.1.0"

#: The repository root (envs/, docker/, validate/ live beside the package).
PROJECT_ROOT = Path(__file__).resolve().parent.parent
#: The validation suite, copied into every image and every installed prefix.
VALIDATE_DIR = PROJECT_ROOT / "validate"
