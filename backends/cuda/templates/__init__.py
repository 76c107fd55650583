"""CUDA C++ kernel templates. Each module renders one kernel family from a plan step."""
