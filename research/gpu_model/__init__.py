"""The memory-access model of the CUDA kernels (model.py, its tracer trace_kernels.cpp); see README.md."""
