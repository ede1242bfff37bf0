"""Pure-PyTorch reference implementations: the oracle for every backend and the fallback on any device.

One module per op family (noise, score, select_children, tree_attention, verify_tree), mirrored by
spot_kernels/triton/ and csrc/cuda/. Functions take the op's arguments without `backend` and assume they were
validated (the op's check in spot_kernels/ops/<family>.py); each module ends with its kernel table, `KERNELS`,
read by spot_kernels.backends.
"""
