"""The GPU memory-access model's tests (research/gpu_model/test_model.py), collected with the suite."""
from research.gpu_model.test_model import *  # noqa: F401,F403
