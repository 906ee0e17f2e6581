"""The CPU emulator header that lets generated CUDA kernels run under g++ (a test tool)."""
