"""Triton kernels for the `torch.ops.spot.*` ops, one module per op family (the `triton` backend).

`spot_kernels.backends` imports `spot_kernels.triton.<family>` on first use and reads its kernel table, `KERNELS`
(the same mechanism as for spot_kernels/reference/). They run on CUDA tensors, and on CPU tensors under
TRITON_INTERPRET=1 (which must be set before these modules are imported). Written for Triton 3.6 and 3.8.
"""
