import os

import torch

# The suite runs tiny models whose ops are dominated by per-call overhead; one intra-op thread is as fast and
# does not fight a second process for the machine's two cores.
torch.set_num_threads(1)

# Without a GPU, Triton kernels run on CPU tensors in Triton's interpreter, which must be switched on before any
# kernel module is imported (spot_kernels.triton.* are imported on first use). With a GPU they compile for real.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
