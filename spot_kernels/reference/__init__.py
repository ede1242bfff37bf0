"""Pure-PyTorch reference implementations: the oracle for every backend and the fallback on any device.

One module per op family (noise, score, select_children, tree_attention, verify_tree), mirrored by spot_kernels/triton/ and
csrc/cuda/. Functions take the op's arguments without `backend` and assume they were validated (spot_kernels.checks).
"""
