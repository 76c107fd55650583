"""The benchmark suite: workloads defined in Saturn and PyTorch, and the `saturn bench` runner."""
